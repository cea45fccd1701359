//! The safetensors layout every router-owned head file shares: f32 tensors plus string
//! metadata. [`HeadFile`] reads one with errors that name the file, the missing key or the
//! wrong tensor; [`write_f32_tensors`] writes one.

use super::head::{f32s_from_le, HeadError};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;

/// A parsed head file: its metadata and tensors, borrowed from the file's bytes.
pub(crate) struct HeadFile<'a> {
    path: &'a Path,
    kind: &'static str,
    info: HashMap<String, String>,
    tensors: SafeTensors<'a>,
}

impl<'a> HeadFile<'a> {
    /// Parses `bytes` read from `path`; `kind` ("head", "router head") names what a file
    /// missing a metadata key is not.
    pub(crate) fn parse(
        path: &'a Path,
        bytes: &'a [u8],
        kind: &'static str,
    ) -> Result<Self, HeadError> {
        let bad = |e: safetensors::SafeTensorError| HeadError::new(path, e.to_string());
        let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(bad)?;
        let info = metadata.metadata().clone().unwrap_or_default();
        let tensors = SafeTensors::deserialize(bytes).map_err(bad)?;
        Ok(Self {
            path,
            kind,
            info,
            tensors,
        })
    }

    /// An error about this file.
    pub(crate) fn error(&self, message: impl Into<String>) -> HeadError {
        HeadError::new(self.path, message)
    }

    /// The metadata value at `key`.
    pub(crate) fn field(&self, key: &str) -> Result<String, HeadError> {
        self.info.get(key).cloned().ok_or_else(|| {
            self.error(format!(
                "not a mom-router {}: metadata has no {key:?}",
                self.kind
            ))
        })
    }

    /// The metadata value at `key`, parsed as JSON.
    pub(crate) fn json<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<T, HeadError> {
        serde_json::from_str(&self.field(key)?)
            .map_err(|e| self.error(format!("metadata {key}: {e}")))
    }

    /// The names of the file's tensors.
    pub(crate) fn names(&self) -> Vec<String> {
        self.tensors
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// Whether the file holds a tensor called `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.tensors.names().contains(&name)
    }

    /// The f32 tensor `name`: its shape and values.
    pub(crate) fn f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), HeadError> {
        let view = self
            .tensors
            .tensor(name)
            .map_err(|e| self.error(format!("tensor {name}: {e}")))?;
        if view.dtype() != Dtype::F32 {
            return Err(self.error(format!("tensor {name} is {:?}, not F32", view.dtype())));
        }
        Ok((view.shape().to_vec(), f32s_from_le(view.data())))
    }
}

/// Writes f32 tensors (name, shape, little-endian bytes) and metadata as one safetensors file.
pub(crate) fn write_f32_tensors(
    path: &Path,
    buffers: &[(String, Vec<usize>, Vec<u8>)],
    info: HashMap<String, String>,
) -> Result<(), HeadError> {
    let views = buffers
        .iter()
        .map(|(name, shape, data)| {
            TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|view| (name.clone(), view))
                .map_err(|e| HeadError::new(path, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize_to_file(views, Some(info), path)
        .map_err(|e| HeadError::new(path, e.to_string()))
}
