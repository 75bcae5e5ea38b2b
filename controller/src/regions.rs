//! The AWS regions this controller may call: `ALLOWED_REGIONS`, checked against every region a
//! user gives (a Resource's `spec.region`, a ResourceMonitor's `spec.regions`) before any AWS
//! call is made to it.

/// The regions the controller may call; any region when empty (the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedRegions(Vec<String>);

impl AllowedRegions {
    /// The allow-list `regions` (blank entries ignored); empty allows any region.
    pub fn new(regions: &[String]) -> Self {
        Self(
            regions
                .iter()
                .map(|r| r.trim().to_owned())
                .filter(|r| !r.is_empty())
                .collect(),
        )
    }

    /// The listed regions (empty: any).
    pub fn list(&self) -> &[String] {
        &self.0
    }

    /// `Ok` when `region`, given in `field`, may be called; otherwise the message of the
    /// condition that refuses it, naming the region and the allowed ones.
    pub fn check(&self, field: &str, region: &str) -> Result<(), String> {
        if self.0.is_empty() || self.0.iter().any(|r| r == region) {
            return Ok(());
        }
        Err(format!(
            "{field}: region {region:?} is not one this controller may call (ALLOWED_REGIONS: {}); use one of them, or ask the operator to allow {region:?}",
            self.0.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_allows_any_region_and_a_refusal_names_region_and_list() {
        let any = AllowedRegions::new(&[]);
        assert!(any.check("spec.region", "ap-south-1").is_ok());
        let some = AllowedRegions::new(&["eu-west-1".into(), " us-west-2 ".into(), "".into()]);
        assert_eq!(some.list(), ["eu-west-1", "us-west-2"]);
        assert!(some.check("spec.region", "us-west-2").is_ok());
        let e = some.check("spec.regions[1]", "ap-south-1").unwrap_err();
        assert!(
            e.starts_with("spec.regions[1]: region \"ap-south-1\""),
            "{e}"
        );
        assert!(e.contains("ALLOWED_REGIONS: eu-west-1, us-west-2"), "{e}");
    }
}
