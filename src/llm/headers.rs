//! The request's HTTP headers (lower-case names, values decoded lossily as UTF-8) and the
//! dynamic metadata Envoy forwarded with them: what filters in front of mom-router established
//! (a verified token's claims), which a client cannot write.

use serde_json::{Map, Value};

/// HTTP request headers in arrival order, names lower-cased, with Envoy's forwarded metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    pairs: Vec<(String, String)>,
    /// Dynamic metadata by filter namespace (`envoy.filters.http.jwt_authn`, …).
    metadata: Map<String, Value>,
}

impl Headers {
    /// Builds headers from name/value pairs; names are lower-cased.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            pairs: pairs
                .into_iter()
                .map(|(mut name, value)| {
                    name.make_ascii_lowercase();
                    (name, value)
                })
                .collect(),
            metadata: Map::new(),
        }
    }

    /// The same headers with the dynamic metadata Envoy forwarded (namespace → its fields).
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The forwarded metadata value at `path` in `namespace`.
    pub fn metadata(&self, namespace: &str, path: &[String]) -> Option<&Value> {
        path.iter()
            .try_fold(self.metadata.get(namespace)?, |value, key| value.get(key))
    }

    /// All pairs in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The `:method` pseudo-header, or empty.
    pub fn method(&self) -> &str {
        self.get(":method").unwrap_or_default()
    }

    /// The `:path` pseudo-header without its query string, or empty.
    pub fn path(&self) -> &str {
        let path = self.get(":path").unwrap_or_default();
        path.split_once('?').map_or(path, |(path, _)| path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_is_read_by_namespace_and_path() {
        let Value::Object(metadata) = json!({
            "envoy.filters.http.jwt_authn": {"jwt_payload": {"sub": "ana", "roles": ["premium"]}}
        }) else {
            unreachable!("an object literal")
        };
        let headers = Headers::new([("X-A".to_owned(), "1".to_owned())]).with_metadata(metadata);
        let path = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let namespace = "envoy.filters.http.jwt_authn";
        assert_eq!(
            headers.metadata(namespace, &path(&["jwt_payload", "roles"])),
            Some(&json!(["premium"]))
        );
        assert_eq!(
            headers.metadata(namespace, &path(&["jwt_payload", "x"])),
            None
        );
        assert_eq!(headers.metadata("other", &path(&["jwt_payload"])), None);
        assert_eq!(headers.get("x-a"), Some("1"));
    }
}
