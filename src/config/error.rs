//! Configuration errors: each names the YAML path of the offending value and says how to fix it.

use std::fmt;

/// One problem found while parsing or compiling a configuration document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// YAML path of the offending value, e.g. `decisions[2].modelRefs[0].model`.
    pub path: String,
    /// What is wrong and how to fix it, as a sentence.
    pub message: String,
}

impl ConfigError {
    /// Builds an error for `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in one configuration document, collected rather than stopping at the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// A single error at `path`.
    pub fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self(vec![ConfigError::new(path, message)])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// Collects errors while a document is parsed and compiled.
#[derive(Debug, Default)]
pub struct Errors(Vec<ConfigError>);

impl Errors {
    /// Records one error at `path`.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError::new(path, message));
    }

    /// True when nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Finishes collection: `Ok(value)` when no error was recorded.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.0))
        }
    }
}
