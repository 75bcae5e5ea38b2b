use super::*;
use booking_shared::time::fixed_clock;
use chrono::TimeZone;

fn spec(holder: &str, renew: &str) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(15),
        renew_time: Some(MicroTime(renew.parse().unwrap())),
        ..Default::default()
    }
}

const D: Duration = Duration::from_secs(15);

/// Expiry counts from when this replica saw the record change, on its own clock: the holder's
/// `renewTime` (far in the past or in the future) plays no part.
#[test]
fn expiry_is_judged_by_the_local_observation_of_a_change() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let old = spec("b", "2001-01-01T00:00:00Z");
    let future = spec("b", "2099-01-01T00:00:00Z");
    // (what is seen at which second, identity asking, asked at second, may acquire)
    type Seen<'a> = &'a [(Option<&'a LeaseSpec>, u64)];
    let cases: &[(Seen, &str, u64, bool)] = &[
        (&[], "a", 0, true),
        (&[(None, 0)], "a", 0, true),
        (
            &[(Some(&spec("a", "2001-01-01T00:00:00Z")), 0)],
            "a",
            1,
            true,
        ),
        (
            &[(Some(&spec("", "2001-01-01T00:00:00Z")), 0)],
            "a",
            1,
            true,
        ),
        // Another's record with a renewTime long past, just seen: not expired.
        (&[(Some(&old), 0)], "a", 14, false),
        (&[(Some(&old), 0)], "a", 15, true),
        // A renewTime in the future does not keep it alive once it stops changing.
        (&[(Some(&future), 0)], "a", 15, true),
        // Seen unchanged again: the observation time does not move.
        (&[(Some(&old), 0), (Some(&old), 10)], "a", 15, true),
        // Seen changed (renewed): counts from the change.
        (&[(Some(&old), 0), (Some(&future), 10)], "a", 15, false),
        (&[(Some(&old), 0), (Some(&future), 10)], "a", 25, true),
    ];
    for (i, (seen, who, at, want)) in cases.iter().enumerate() {
        let mut o = Observed::default();
        for (spec, sec) in *seen {
            o.see(*spec, t0 + s(*sec));
        }
        assert_eq!(
            o.may_acquire(who, D, t0 + s(*at)),
            *want,
            "case {i}: {seen:?}"
        );
    }
    let mut o = Observed::default();
    assert_eq!(o.holder(), "");
    o.see(Some(&old), t0);
    assert_eq!(o.holder(), "b");
    // The record's own duration counts; the default only when it names none.
    let mut short = old.clone();
    short.lease_duration_seconds = Some(5);
    let mut o = Observed::default();
    o.see(Some(&short), t0);
    assert!(o.may_acquire("a", D, t0 + s(5)));
    short.lease_duration_seconds = None;
    let mut o = Observed::default();
    o.see(Some(&short), t0);
    assert!(!o.may_acquire("a", D, t0 + s(14)));
}

#[test]
fn validity_allows_acting_only_before_its_end() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let cases = [
        (Validity::Always, 0, Ok(None)),
        (Validity::Until(t0 + s(10)), 9, Ok(Some(t0 + s(10)))),
        (Validity::Until(t0 + s(10)), 10, Err(())),
        (Validity::Until(t0 + s(10)), 11, Err(())),
        (Validity::Never, 0, Err(())),
    ];
    for (v, at, want) in cases {
        assert_eq!(v.check(t0 + s(at)).map_err(|_| ()), want, "{v:?} at {at}");
    }
    let (tx, lead) = Leadership::channel();
    assert!(lead.check(t0).is_err(), "not leading until acquired");
    tx.send_replace(Validity::Until(t0 + s(10)));
    assert!(lead.check(t0 + s(1)).is_ok());
    tx.send_replace(Validity::Never);
    assert!(lead.check(t0 + s(1)).unwrap_err().contains("does not hold"));
    assert!(Leadership::unfenced().check(t0).is_ok());
}

#[test]
fn the_written_record_counts_transitions_and_keeps_the_acquire_time_of_a_renewal() {
    let cfg = LeaseConfig {
        name: "l".into(),
        namespace: "n".into(),
        identity: "a".into(),
        duration: D,
        renew_deadline: Duration::from_secs(10),
        retry: Duration::from_secs(2),
    };
    let wall = fixed_clock(chrono::Utc.with_ymd_and_hms(2031, 1, 1, 0, 0, 0).unwrap());
    let created = spec_for(None, &cfg, &wall);
    assert_eq!(created.lease_transitions, Some(0));
    assert_eq!(created.holder_identity.as_deref(), Some("a"));
    assert_eq!(created.lease_duration_seconds, Some(15));
    let mut ours = spec("a", "2001-01-01T00:00:00Z");
    ours.acquire_time = Some(MicroTime("2000-01-01T00:00:00Z".parse().unwrap()));
    ours.lease_transitions = Some(3);
    let renewed = spec_for(Some(&ours), &cfg, &wall);
    assert_eq!(renewed.acquire_time, ours.acquire_time);
    assert_eq!(renewed.lease_transitions, Some(3));
    assert_eq!(renewed.renew_time, Some(micro(&wall)));
    let mut theirs = ours.clone();
    theirs.holder_identity = Some("b".into());
    let taken = spec_for(Some(&theirs), &cfg, &wall);
    assert_eq!(taken.lease_transitions, Some(4));
    assert_eq!(taken.acquire_time, Some(micro(&wall)));
    assert!(cfg.attempt_timeout() < cfg.renew_deadline);
    assert_eq!(cfg.attempt_timeout(), Duration::from_secs(8));
}
