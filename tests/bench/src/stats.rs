//! Percentiles of latency samples.

use std::time::Duration;

/// Latency samples, in microseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    micros: Vec<u64>,
}

impl Samples {
    /// Adds one sample.
    pub fn push(&mut self, d: Duration) {
        self.micros
            .push(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// Adds every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.micros.extend_from_slice(&other.micros);
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.micros.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.micros.is_empty()
    }

    /// The `q` quantile (0..=1) in milliseconds, nearest-rank; `None` without samples.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        quantile_ms(&self.micros, q)
    }
}

/// The nearest-rank `q` quantile of microsecond samples, in milliseconds.
pub fn quantile_ms(micros: &[u64], q: f64) -> Option<f64> {
    if micros.is_empty() {
        return None;
    }
    let mut sorted = micros.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    let idx = rank.saturating_sub(1).min(sorted.len() - 1);
    Some(sorted[idx] as f64 / 1000.0)
}

/// The median of a few numbers (e.g. throughput of repeated rounds).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(quantile_ms(&s, 0.99), Some(99.0));
        assert_eq!(quantile_ms(&s, 0.5), Some(50.0));
        assert_eq!(quantile_ms(&s, 1.0), Some(100.0));
        assert_eq!(quantile_ms(&[], 0.5), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    }
}
