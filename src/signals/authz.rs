//! Authz signal: the caller's roles from a trusted source. Either Envoy dynamic metadata that a
//! filter in front of mom-router wrote (the claims of a token `jwt_authn` verified: a client
//! cannot write it), or an identity header an authentication filter sets — which Envoy must
//! strip from client requests, since mom-router trusts a header as given.

use super::{Evidence, SignalError};
use crate::llm::Headers;
use serde_json::Value;

/// Where the caller's roles are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolesSource {
    /// A header of comma-separated roles.
    Header(String),
    /// Forwarded dynamic metadata: a string of comma-separated roles or a list of strings at
    /// `path` in `namespace`.
    Metadata {
        /// The filter namespace (`envoy.filters.http.jwt_authn`).
        namespace: String,
        /// Keys from the namespace to the roles (`[jwt_payload, roles]`).
        path: Vec<String>,
    },
}

/// Matches when the caller holds any of the configured roles.
#[derive(Debug, Clone)]
pub struct AuthzSignal {
    source: RolesSource,
    roles: Vec<String>,
}

impl AuthzSignal {
    /// Builds the signal.
    pub fn new(source: RolesSource, roles: &[String]) -> Result<Self, SignalError> {
        let source = match source {
            RolesSource::Header(header) if header.trim().is_empty() => {
                return Err(SignalError::new("header", "name the trusted roles header"));
            }
            RolesSource::Header(header) => RolesSource::Header(header.to_ascii_lowercase()),
            RolesSource::Metadata { namespace, .. } if namespace.trim().is_empty() => {
                return Err(SignalError::new(
                    "metadata.namespace",
                    "name the filter namespace",
                ));
            }
            RolesSource::Metadata { path, .. } if path.is_empty() => {
                return Err(SignalError::new(
                    "metadata.path",
                    "list the keys that lead to the roles",
                ));
            }
            metadata => metadata,
        };
        if roles.is_empty() {
            return Err(SignalError::new("roles", "list at least one role"));
        }
        Ok(Self {
            source,
            roles: roles.to_vec(),
        })
    }

    /// The metadata namespace Envoy must forward for this signal, if it reads one.
    pub fn namespace(&self) -> Option<&str> {
        match &self.source {
            RolesSource::Metadata { namespace, .. } => Some(namespace),
            RolesSource::Header(_) => None,
        }
    }

    pub(super) fn evaluate(&self, headers: &Headers) -> Evidence {
        let wanted = |role: &&str| self.roles.iter().any(|wanted| wanted == role);
        let role = match &self.source {
            RolesSource::Header(header) => {
                let held = headers.get(header).unwrap_or_default();
                held.split(',').map(str::trim).find(wanted)
            }
            RolesSource::Metadata { namespace, path } => match headers.metadata(namespace, path) {
                Some(Value::String(held)) => held.split(',').map(str::trim).find(wanted),
                Some(Value::Array(held)) => held
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::trim)
                    .find(wanted),
                _ => None,
            },
        };
        Evidence {
            label: role.map(str::to_owned),
            ..Evidence::certain(role.is_some())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roles(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn matches_any_listed_role_in_a_comma_separated_header() {
        let source = RolesSource::Header("x-mom-user-roles".to_owned());
        let signal = AuthzSignal::new(source, &roles(&["admin"])).unwrap();
        let headers = Headers::new([("X-Mom-User-Roles".to_owned(), "dev, admin".to_owned())]);
        let e = signal.evaluate(&headers);
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("admin"));
        assert!(!signal.evaluate(&Headers::default()).matched);
    }

    #[test]
    fn metadata_roles_come_from_verified_claims_and_never_from_a_header() {
        let source = RolesSource::Metadata {
            namespace: "envoy.filters.http.jwt_authn".to_owned(),
            path: roles(&["jwt_payload", "roles"]),
        };
        let signal = AuthzSignal::new(source, &roles(&["premium"])).unwrap();
        assert_eq!(signal.namespace(), Some("envoy.filters.http.jwt_authn"));
        let claims = |value: Value| {
            let Value::Object(metadata) =
                json!({"envoy.filters.http.jwt_authn": {"jwt_payload": {"roles": value}}})
            else {
                unreachable!("an object literal")
            };
            metadata
        };
        let listed = Headers::default().with_metadata(claims(json!(["staff", "premium"])));
        assert_eq!(signal.evaluate(&listed).label.as_deref(), Some("premium"));
        let joined = Headers::default().with_metadata(claims(json!("staff, premium")));
        assert!(signal.evaluate(&joined).matched);
        let other = Headers::default().with_metadata(claims(json!(["staff"])));
        assert!(!signal.evaluate(&other).matched);
        let wrong_type = Headers::default().with_metadata(claims(json!(7)));
        assert!(!signal.evaluate(&wrong_type).matched);
        // A client sending the roles header gets nothing from a metadata-sourced signal.
        let spoofed = Headers::new([("x-mom-user-roles".to_owned(), "premium".to_owned())]);
        assert!(!signal.evaluate(&spoofed).matched);
    }

    #[test]
    fn an_incomplete_source_is_refused_by_field() {
        let empty = RolesSource::Metadata {
            namespace: "envoy.filters.http.jwt_authn".to_owned(),
            path: Vec::new(),
        };
        let refused = AuthzSignal::new(empty, &roles(&["premium"])).unwrap_err();
        assert!(
            format!("{refused:?}").contains("metadata.path"),
            "{refused:?}"
        );
    }
}
