use super::*;
use booking_shared::arbitration::arbitrate;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// A booking created at `created` minutes past a fixed instant (earlier created wins).
fn view(name: &str, created: i64, start: &str, end: &str) -> BookingView {
    BookingView {
        name: name.into(),
        created: Some(t("2026-11-01T00:00:00Z") + Duration::minutes(created)),
        user: format!("user-{name}"),
        slot: Ok(Slot::new(t(start), t(end)).unwrap()),
        deleting: false,
    }
}

fn at(views: &[BookingView], now: DateTime<Utc>) -> Vec<Entry> {
    entries(views, &arbitrate(views, now))
}

fn december() -> Vec<BookingView> {
    vec![
        // Started before the window.
        view("early", 0, "2026-12-06T20:00:00Z", "2026-12-07T02:00:00Z"),
        // Over midnight.
        view("night", 1, "2026-12-07T22:00:00Z", "2026-12-08T01:30:00Z"),
        // Created later, overlapping night: never holds.
        view("late", 2, "2026-12-07T22:30:00Z", "2026-12-07T23:30:00Z"),
        // Back to back inside one half-hour.
        view("a", 3, "2026-12-08T09:00:00Z", "2026-12-08T09:15:00Z"),
        view("b", 4, "2026-12-08T09:15:00Z", "2026-12-08T12:00:00Z"),
        view("c", 5, "2026-12-09T14:00:00Z", "2026-12-09T16:00:00Z"),
        // After the window.
        view("after", 6, "2026-12-12T14:00:00Z", "2026-12-12T16:00:00Z"),
    ]
}

fn window(from: &str, days: u32, tz: &str) -> Window {
    Window {
        from: NaiveDate::parse_from_str(from, "%Y-%m-%d").unwrap(),
        days,
        tz: tz.parse().unwrap(),
    }
}

#[test]
fn days_in_utc_with_bookings_over_midnight_before_the_window_and_now() {
    let now = t("2026-12-08T13:10:00Z");
    let w = window("2026-12-07", 3, "UTC");
    let got = render("team", "ec2.web", &at(&december(), now), &w, now);
    let want = "\
Resource ec2.web in team, Mon 2026-12-07 to Wed 2026-12-09, times in UTC; one character per 30 min
                 00    03    06    09    12    15    18    21
Mon 2026-12-07   AAAA........................................BBBB
Tue 2026-12-08   BBB...............*DDDDD........................
                                           ^ now 13:10
Wed 2026-12-09   ............................EEEE................

. free   * several holders in one half-hour   blank: a time the zone skips

KEY   BOOKING   USER         START                  END                    PHASE       NOTE
A     early     user-early   Sun 2026-12-06 20:00   Mon 2026-12-07 02:00   FINISHED
B     night     user-night   Mon 2026-12-07 22:00   Tue 2026-12-08 01:30   FINISHED
-     late      user-late    Mon 2026-12-07 22:30   Mon 2026-12-07 23:30   FINISHED    overlaps night: never holds
C     a         user-a       Tue 2026-12-08 09:00   Tue 2026-12-08 09:15   FINISHED
D     b         user-b       Tue 2026-12-08 09:15   Tue 2026-12-08 12:00   FINISHED
E     c         user-c       Wed 2026-12-09 14:00   Wed 2026-12-09 16:00   SCHEDULED
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn the_zone_shifts_the_bars_and_now_outside_the_window_draws_no_marker() {
    // Berlin is UTC+1 in December: every booking one hour later on the wall.
    let now = t("2026-12-01T00:00:00Z");
    let w = window("2026-12-08", 1, "Europe/Berlin");
    let got = render("team", "ec2.web", &at(&december(), now), &w, now);
    let want = "\
Resource ec2.web in team, Tue 2026-12-08, times in Europe/Berlin; one character per 30 min
                 00    03    06    09    12    15    18    21
Tue 2026-12-08   AAAAA...............*CCCCC......................

. free   * several holders in one half-hour   blank: a time the zone skips

KEY   BOOKING   USER         START                  END                    PHASE       NOTE
A     night     user-night   Mon 2026-12-07 23:00   Tue 2026-12-08 02:30   SCHEDULED
-     late      user-late    Mon 2026-12-07 23:30   Tue 2026-12-08 00:30   SCHEDULED   overlaps night: never holds
B     a         user-a       Tue 2026-12-08 10:00   Tue 2026-12-08 10:15   SCHEDULED
C     b         user-b       Tue 2026-12-08 10:15   Tue 2026-12-08 13:00   SCHEDULED
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn a_day_of_25_hours_draws_the_repeated_hour_once_and_later_hours_in_place() {
    let views = vec![
        // 02:30 CEST (first 02:30) to 03:00 CET: the rest of the first 02:00-03:00 and all of
        // the second.
        view("twice", 0, "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z"),
        // 08:00 to 10:00 CET, after the change.
        view("after", 1, "2026-10-25T07:00:00Z", "2026-10-25T09:00:00Z"),
    ];
    let now = t("2026-10-01T00:00:00Z");
    let w = window("2026-10-24", 3, "Europe/Berlin");
    let got = render("team", "ec2.web", &at(&views, now), &w, now);
    let want = "\
Resource ec2.web in team, Sat 2026-10-24 to Mon 2026-10-26, times in Europe/Berlin; one character per 30 min
                 00    03    06    09    12    15    18    21
Sat 2026-10-24   ................................................
Sun 2026-10-25   ....AA..........BBBB............................   25 h
Mon 2026-10-26   ................................................

. free   * several holders in one half-hour   blank: a time the zone skips

KEY   BOOKING   USER         START                         END                    PHASE       NOTE
A     twice     user-twice   Sun 2026-10-25 02:30 +02:00   Sun 2026-10-25 03:00   SCHEDULED
B     after     user-after   Sun 2026-10-25 08:00          Sun 2026-10-25 10:00   SCHEDULED
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn a_day_of_23_hours_leaves_the_skipped_hour_blank() {
    // 01:00 CET to 05:00 CEST: 02:00-03:00 does not exist that night.
    let views = vec![view(
        "spring",
        0,
        "2027-03-28T00:00:00Z",
        "2027-03-28T03:00:00Z",
    )];
    let now = t("2027-03-01T00:00:00Z");
    let w = window("2027-03-28", 1, "Europe/Berlin");
    let got = render("team", "ec2.web", &at(&views, now), &w, now);
    let want = "\
Resource ec2.web in team, Sun 2027-03-28, times in Europe/Berlin; one character per 30 min
                 00    03    06    09    12    15    18    21
Sun 2027-03-28   ..AA  AAAA......................................   23 h

. free   * several holders in one half-hour   blank: a time the zone skips

KEY   BOOKING   USER          START                  END                    PHASE       NOTE
A     spring    user-spring   Sun 2027-03-28 01:00   Sun 2027-03-28 05:00   SCHEDULED
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn an_empty_window_says_so() {
    let now = t("2026-12-01T00:00:00Z");
    let w = window("2026-12-20", 1, "UTC");
    let got = render("team", "ec2.web", &at(&december(), now), &w, now);
    assert!(
        got.ends_with("Sun 2026-12-20   ................................................\n\n. free   * several holders in one half-hour   blank: a time the zone skips\n\nNo bookings in these days.\n"),
        "\n{got}"
    );
}

#[test]
fn the_structured_timeline_lists_the_bookings_of_the_window_with_their_keys() {
    let now = t("2026-12-08T13:10:00Z");
    let w = window("2026-12-07", 3, "Europe/Berlin");
    let data = timeline("team", "ec2.web", &at(&december(), now), &w);
    let json = serde_json::to_value(&data).unwrap();
    assert_eq!(json["timeZone"], "Europe/Berlin");
    assert_eq!(json["start"], "2026-12-07T00:00:00+01:00");
    assert_eq!(json["end"], "2026-12-10T00:00:00+01:00");
    let keys: Vec<_> = data
        .bookings
        .iter()
        .map(|b| (b.key.as_str(), b.booking.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("A", "early"),
            ("B", "night"),
            ("-", "late"),
            ("C", "a"),
            ("D", "b"),
            ("E", "c")
        ]
    );
    assert_eq!(json["bookings"][2]["conflictsWith"], "night");
    assert_eq!(json["bookings"][2]["holds"], false);
    assert_eq!(json["bookings"][5]["phase"], "SCHEDULED");
}

#[test]
fn free_slots_start_at_now_or_the_window_and_skip_what_is_held() {
    let w = window("2026-12-07", 3, "UTC");
    let slots = |now: &str, min: i64| {
        let now = t(now);
        let e = at(&december(), now);
        free_table(&free_slots(&e, &w, now, Duration::hours(min)), w.tz)
    };
    // Before the window: from its start; late's slot (rejected) is free in truth, but inside
    // night's.
    assert_eq!(
        slots("2026-12-01T00:00:00Z", 8),
        "\
START                  END                    LENGTH
Mon 2026-12-07 02:00   Mon 2026-12-07 22:00   20h
Tue 2026-12-08 12:00   Wed 2026-12-09 14:00   26h
Wed 2026-12-09 16:00   Thu 2026-12-10 00:00   8h
"
    );
    // Within it: from now.
    assert_eq!(
        slots("2026-12-08T13:10:00Z", 2),
        "\
START                  END                    LENGTH
Tue 2026-12-08 13:10   Wed 2026-12-09 14:00   24h 50m
Wed 2026-12-09 16:00   Thu 2026-12-10 00:00   8h
"
    );
    assert_eq!(
        slots("2026-12-08T13:10:00Z", 30),
        "No free slot of that length in these days.\n"
    );
    let rows = free_rows(
        &free_slots(
            &at(&december(), t("2026-12-09T17:00:00Z")),
            &w,
            t("2026-12-09T17:00:00Z"),
            Duration::hours(2),
        ),
        w.tz,
    );
    assert_eq!(
        serde_json::to_value(&rows).unwrap(),
        serde_json::json!([{"start": "2026-12-09T17:00:00Z", "end": "2026-12-10T00:00:00Z", "length": "7h"}])
    );
}

#[test]
fn a_deleting_booking_holds_nothing() {
    let mut views = december();
    views[5].deleting = true;
    let now = t("2026-12-01T00:00:00Z");
    let w = window("2026-12-09", 1, "UTC");
    let got = render("team", "ec2.web", &at(&views, now), &w, now);
    assert!(
        got.contains("Wed 2026-12-09   ................................................\n"),
        "\n{got}"
    );
    assert!(got.contains("being deleted: holds nothing"), "\n{got}");
}
