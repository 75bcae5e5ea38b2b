//! `/validate`'s in-process cost per review, for counting instructions with callgrind, which
//! repeats where wall time on a shared machine does not (BENCHMARKS.md, "Webhook: the
//! reservation of a real create").
//!
//! ```text
//! cargo build --release -p booking-webhook --example admit_instructions
//! valgrind --tool=callgrind target/release/examples/admit_instructions 1000
//! valgrind --tool=callgrind target/release/examples/admit_instructions 3000
//! ```
//!
//! The difference of the two totals over 2,000 is one review's instructions, start-up and index
//! building cancelled out. The review is shaped like the API server's (managedFields, the
//! last-applied annotation, labels, userInfo groups and extra, options) and is a real create
//! (not dry-run), so each call reserves its slot as in the bench's load; the index holds
//! `BOOKINGS` stored bookings (default 10,000) over 100 Resources of the namespace.
//!
//! Arguments: `CALLS [BOOKINGS]`.

#[path = "../tests/common/mod.rs"]
mod common;

use booking_webhook::admission::{Endpoint, admit};
use common::{Req, booking, real_review, resource, state_with, stored_shape};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: usize| {
        args.next()
            .map(|a| a.parse::<usize>().expect("a count"))
            .unwrap_or(default)
    };
    let calls = number(1_000);
    let stored = number(10_000);
    let resources = 100;
    let bookings: Vec<_> = (0..stored)
        .map(|i| {
            let round = i64::try_from(i / resources).expect("a small count");
            booking(
                "ns",
                &format!("b-{i:06}"),
                &format!("r{}", i % resources),
                1 + 2 * round,
                2 + 2 * round,
                "ann",
            )
        })
        .collect();
    let state = state_with(&bookings, &[resource("ns", "r0")]);
    // Between r0's first two bookings: admitted, and reserved again by every call.
    let body = real_review(&Req::create(stored_shape(booking(
        "ns", "probe", "r0", 2, 3, "ann",
    ))));
    let first = admit(&state, Endpoint::Validate, &body).to_json();
    assert!(
        String::from_utf8_lossy(&first).contains("\"allowed\":true"),
        "the review is admitted: {}",
        String::from_utf8_lossy(&first)
    );
    for _ in 1..calls {
        std::hint::black_box(
            admit(&state, Endpoint::Validate, std::hint::black_box(&body)).to_json(),
        );
    }
    println!("{calls} reviews admitted, {stored} bookings stored");
}
