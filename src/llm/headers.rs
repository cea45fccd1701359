//! The request's HTTP headers: lower-case names, values decoded lossily as UTF-8.

/// HTTP request headers in arrival order, names lower-cased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// Builds headers from name/value pairs; names are lower-cased.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(name, value)| (name.to_ascii_lowercase(), value))
                .collect(),
        )
    }

    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// All pairs in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
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
