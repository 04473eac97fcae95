//! The arithmetic of results: mean and deviation of runs, latency
//! percentiles, and latencies corrected for coordinated omission.

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

/// Mean and sample standard deviation (n − 1), as the paper reports its 5 runs.
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Median of a list.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// A latency histogram in microseconds (1 µs to 100 s, 2 significant
/// digits: 1% resolution, a few KiB per histogram — every client connection
/// keeps one per window).
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 2).expect("valid bounds")
}

/// Records a latency, clamped into the histogram's range.
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = (d.as_micros() as u64).clamp(1, h.high());
    h.record(us).expect("clamped into range");
}

/// The latency of a request in an open-loop run: measured from when it was
/// *meant* to be sent, not when it was, so a stalled server cannot hide the
/// queueing its stall caused (no coordinated omission).
pub fn corrected_latency(intended: Instant, done: Instant) -> Duration {
    done.saturating_duration_since(intended)
}

/// Percentiles of a histogram, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
}

impl Percentiles {
    /// Reads them from `h` (zeros if empty).
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_deviation() {
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((sd - 2.138).abs() < 0.001, "{sd}");
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
        assert_eq!(mean_sd(&[]), (0.0, 0.0));
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn percentiles_from_a_histogram() {
        let mut h = latency_histogram();
        for us in 1..=1000u64 {
            record(&mut h, Duration::from_micros(us));
        }
        let p = Percentiles::of(&h);
        // Two significant digits: within 1% of the exact value.
        assert!((495..=505).contains(&p.p50_us), "{p:?}");
        assert!((980..=1000).contains(&p.p99_us), "{p:?}");
        assert!((990..=1010).contains(&p.max_us), "{p:?}");
        // Out-of-range values are clamped, not lost.
        record(&mut h, Duration::from_secs(1000));
        assert_eq!(h.len(), 1001);
    }

    #[test]
    fn corrected_latency_counts_from_the_intended_time() {
        let t0 = Instant::now();
        let intended = t0;
        let sent_late = t0 + Duration::from_millis(40); // the client was held up
        let done = sent_late + Duration::from_millis(1);
        assert_eq!(corrected_latency(intended, done), Duration::from_millis(41));
        // Never negative.
        assert_eq!(corrected_latency(done, t0), Duration::ZERO);
    }
}
