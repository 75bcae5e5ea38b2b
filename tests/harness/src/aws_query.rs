//! Reading AWS Query-protocol requests (EC2 and RDS): service, action and parameters.
//!
//! EC2 and RDS use the AWS Query protocol: the action and its parameters are
//! `application/x-www-form-urlencoded` pairs in the POST body (the SDKs' way) or in the URL's
//! query string. The service is not in the request line, since one endpoint URL (moto's)
//! serves all; it is read from the SigV4 credential scope of the `Authorization` header
//! (`Credential=AKID/20240101/eu-central-1/ec2/aws4_request`), falling back to the API
//! `Version` parameter.

/// The EC2 API version the SDK sends (`Version=2016-11-15`).
pub const EC2_API_VERSION: &str = "2016-11-15";
/// The RDS API version the SDK sends (`Version=2014-10-31`).
pub const RDS_API_VERSION: &str = "2014-10-31";

/// An AWS service known to the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    /// Amazon EC2 (signing name `ec2`).
    Ec2,
    /// Amazon RDS (signing name `rds`).
    Rds,
}

impl Service {
    /// The SigV4 signing name.
    pub fn signing_name(self) -> &'static str {
        match self {
            Service::Ec2 => "ec2",
            Service::Rds => "rds",
        }
    }
}

/// One Query-protocol request, as far as the harness needs to know it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryRequest {
    /// The service, when it can be told.
    pub service: Option<Service>,
    /// The SigV4 signing name from the `Authorization` header (e.g. `ec2`, `rds`, `sts`).
    pub signing_name: Option<String>,
    /// The `Action` parameter (e.g. `StartInstances`), when present.
    pub action: Option<String>,
    /// All parameters, query string first, then body, in order.
    pub params: Vec<(String, String)>,
}

impl QueryRequest {
    /// Parses a request from its URL query string, `Content-Type`, `Authorization` header
    /// and body. Never fails: what cannot be read is left out.
    pub fn parse(
        query: Option<&str>,
        content_type: Option<&str>,
        authorization: Option<&str>,
        body: &[u8],
    ) -> Self {
        let mut params: Vec<(String, String)> = query
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let is_form = content_type.is_some_and(|ct| {
            ct.trim()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
        if is_form {
            params.extend(form_urlencoded::parse(body).into_owned());
        }
        let signing_name = authorization.and_then(signing_name_from_authorization);
        let version = params
            .iter()
            .find(|(k, _)| k == "Version")
            .map(|(_, v)| v.as_str());
        let service = match (signing_name.as_deref(), version) {
            (Some("ec2"), _) => Some(Service::Ec2),
            (Some("rds"), _) => Some(Service::Rds),
            (Some(_), _) => None,
            (None, Some(EC2_API_VERSION)) => Some(Service::Ec2),
            (None, Some(RDS_API_VERSION)) => Some(Service::Rds),
            (None, _) => None,
        };
        let action = params
            .iter()
            .find(|(k, _)| k == "Action")
            .map(|(_, v)| v.clone());
        QueryRequest {
            service,
            signing_name,
            action,
            params,
        }
    }

    /// The first value of parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The resource identifiers the request names: EC2 `InstanceId.N` parameters and the RDS
    /// `DBInstanceIdentifier` (also `DBClusterIdentifier`).
    pub fn resource_ids(&self) -> Vec<&str> {
        self.params
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix("InstanceId.")
                    .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
                    || k == "InstanceId"
                    || k == "DBInstanceIdentifier"
                    || k == "DBClusterIdentifier"
            })
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// The service's signing name from a SigV4 `Authorization` header
/// (`AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request, ...`).
pub fn signing_name_from_authorization(authorization: &str) -> Option<String> {
    let credential = authorization
        .split([',', ' '])
        .find_map(|part| part.trim().strip_prefix("Credential="))?;
    let mut scope = credential.split('/');
    // AKID, date, region, service, terminator
    let service = scope.nth(3)?;
    (!service.is_empty()).then(|| service.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUTH: &str = "AWS4-HMAC-SHA256 Credential=testing/20261130/eu-central-1/ec2/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=abc";

    #[test]
    fn reads_action_ids_and_service_from_form_body() {
        let body = b"Action=StopInstances&Version=2016-11-15&InstanceId.1=i-1&InstanceId.2=i-2";
        let req = QueryRequest::parse(
            None,
            Some("application/x-www-form-urlencoded; charset=utf-8"),
            Some(AUTH),
            body,
        );
        assert_eq!(req.action.as_deref(), Some("StopInstances"));
        assert_eq!(req.service, Some(Service::Ec2));
        assert_eq!(req.signing_name.as_deref(), Some("ec2"));
        assert_eq!(req.resource_ids(), vec!["i-1", "i-2"]);
    }

    #[test]
    fn reads_query_string_and_falls_back_to_version() {
        let req = QueryRequest::parse(
            Some("Action=StartDBInstance&Version=2014-10-31&DBInstanceIdentifier=db%2D1"),
            None,
            None,
            b"ignored=because-not-form",
        );
        assert_eq!(req.action.as_deref(), Some("StartDBInstance"));
        assert_eq!(req.service, Some(Service::Rds));
        assert_eq!(req.resource_ids(), vec!["db-1"]);
        assert_eq!(req.param("ignored"), None);
    }

    #[test]
    fn garbage_yields_nothing_without_panicking() {
        let req = QueryRequest::parse(
            Some("%%%&&=="),
            Some("application/x-www-form-urlencoded"),
            Some("Bearer xyz"),
            &[0xff, 0xfe, b'=', b'&'],
        );
        assert_eq!(req.action, None);
        assert_eq!(req.service, None);
        assert_eq!(signing_name_from_authorization("Credential=a/b"), None);
        assert_eq!(signing_name_from_authorization(""), None);
    }

    #[test]
    fn other_services_are_named_but_not_classified() {
        let auth = AUTH.replace("/ec2/", "/sts/");
        let req = QueryRequest::parse(
            Some("Action=GetCallerIdentity&Version=2016-11-15"),
            None,
            Some(&auth),
            b"",
        );
        assert_eq!(req.signing_name.as_deref(), Some("sts"));
        assert_eq!(req.service, None);
    }
}
