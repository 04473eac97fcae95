//! The paper's workload (seed 001): a fixed record set, value sizes of
//! 10-103 bytes in a logarithmic distribution, a get:set mix, and a key choice
//! that is uniform or Zipf.

/// Smallest value size in the paper's data set.
pub const MIN_VALUE: usize = 10;
/// Largest value size in the paper's data set.
pub const MAX_VALUE: usize = 103;

/// How keys are picked.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyChoice {
    /// Every record equally likely.
    Uniform,
    /// Zipf with exponent `s` (record 0 the most popular).
    Zipf(f64),
}

impl std::str::FromStr for KeyChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(KeyChoice::Uniform),
            "zipf" => Ok(KeyChoice::Zipf(0.99)),
            _ => match s.strip_prefix("zipf:").map(str::parse::<f64>) {
                Some(Ok(x)) if x > 0.0 && x.is_finite() => Ok(KeyChoice::Zipf(x)),
                _ => Err(format!(
                    "key choice must be uniform, zipf or zipf:S (S > 0), not {s:?}"
                )),
            },
        }
    }
}

/// A workload: which records exist and how requests pick them.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Number of records (30,000 in the paper).
    pub records: usize,
    /// Gets per set (9 means 9:1).
    pub gets_per_set: u32,
    /// Key distribution.
    pub keys: KeyChoice,
    /// Cumulative Zipf probabilities (empty for uniform).
    cdf: Vec<f64>,
}

impl Workload {
    /// A workload; `records` ≥ 1.
    pub fn new(records: usize, gets_per_set: u32, keys: KeyChoice) -> Workload {
        let records = records.max(1);
        let cdf = match keys {
            KeyChoice::Uniform => Vec::new(),
            KeyChoice::Zipf(s) => zipf_cdf(records, s),
        };
        Workload {
            records,
            gets_per_set,
            keys,
            cdf,
        }
    }

    /// The paper's: 30,000 records, 9:1 gets to sets, uniform keys.
    pub fn paper() -> Workload {
        Workload::new(30_000, 9, KeyChoice::Uniform)
    }

    /// The key of record `i`.
    pub fn key(i: usize) -> String {
        Self::key_display(i).to_string()
    }

    /// [`key`](Self::key) without the allocation, for formatting in place.
    pub fn key_display(i: usize) -> impl std::fmt::Display {
        struct Key(usize);
        impl std::fmt::Display for Key {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "rec:{:06}", self.0)
            }
        }
        Key(i)
    }

    /// The value size of record `i`: deterministic, log-distributed in
    /// `MIN_VALUE..=MAX_VALUE`.
    pub fn value_size(i: usize) -> usize {
        let u = unit(mix(i as u64));
        log_size(u)
    }

    /// Picks a record.
    pub fn pick(&self, rng: &mut fastrand::Rng) -> usize {
        if self.cdf.is_empty() {
            rng.usize(..self.records)
        } else {
            let u = rng.f64();
            self.cdf.partition_point(|&c| c < u).min(self.records - 1)
        }
    }

    /// True if the next request should be a set.
    pub fn is_set(&self, rng: &mut fastrand::Rng) -> bool {
        rng.u32(..self.gets_per_set + 1) == 0
    }
}

/// Maps u ∈ [0, 1) to a size whose logarithm is uniform over [ln 10, ln 104).
pub fn log_size(u: f64) -> usize {
    let (lo, hi) = ((MIN_VALUE as f64).ln(), ((MAX_VALUE + 1) as f64).ln());
    ((lo + u * (hi - lo)).exp() as usize).clamp(MIN_VALUE, MAX_VALUE)
}

/// Cumulative Zipf(s) probabilities over `n` ranks.
pub fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

fn mix(mut x: u64) -> u64 {
    // splitmix64: a fixed, well-spread hash of the record index.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_sizes_stay_in_range_and_lean_small() {
        let sizes: Vec<usize> = (0..30_000).map(Workload::value_size).collect();
        assert!(sizes.iter().all(|&s| (MIN_VALUE..=MAX_VALUE).contains(&s)));
        assert_eq!(*sizes.iter().min().unwrap(), MIN_VALUE);
        assert!(*sizes.iter().max().unwrap() >= 100);
        // Log-uniform: about half the sizes fall below the geometric midpoint (~32).
        let below = sizes.iter().filter(|&&s| s < 32).count() as f64 / sizes.len() as f64;
        assert!((0.45..0.55).contains(&below), "{below}");
        // The median is far below the arithmetic midpoint (56).
        let mut s = sizes.clone();
        s.sort();
        assert!(s[s.len() / 2] < 45);
    }

    #[test]
    fn log_size_ends() {
        assert_eq!(log_size(0.0), MIN_VALUE);
        assert_eq!(log_size(0.999_999), MAX_VALUE);
    }

    #[test]
    fn zipf_cdf_is_monotone_and_ends_at_one() {
        let c = zipf_cdf(1000, 0.99);
        assert!(c.windows(2).all(|w| w[0] < w[1]));
        assert!((c[999] - 1.0).abs() < 1e-9);
        // Rank 1 of Zipf(0.99) over 1000 keys carries about 13%.
        assert!((0.10..0.16).contains(&c[0]), "{}", c[0]);
    }

    #[test]
    fn picks_follow_the_distribution() {
        let mut rng = fastrand::Rng::with_seed(7);
        let w = Workload::new(100, 9, KeyChoice::Zipf(1.0));
        let mut hits = [0usize; 100];
        for _ in 0..100_000 {
            hits[w.pick(&mut rng)] += 1;
        }
        assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[99]);
        let u = Workload::new(10, 9, KeyChoice::Uniform);
        let mut c = [0usize; 10];
        for _ in 0..100_000 {
            c[u.pick(&mut rng)] += 1;
        }
        assert!(c.iter().all(|&n| (9_000..11_000).contains(&n)), "{c:?}");
    }

    #[test]
    fn set_share_matches_the_mix() {
        let mut rng = fastrand::Rng::with_seed(1);
        let w = Workload::paper();
        let sets = (0..100_000).filter(|_| w.is_set(&mut rng)).count();
        assert!((9_000..11_000).contains(&sets), "{sets}");
    }

    #[test]
    fn parses_key_choice() {
        assert_eq!("uniform".parse::<KeyChoice>(), Ok(KeyChoice::Uniform));
        assert_eq!("zipf:1.2".parse::<KeyChoice>(), Ok(KeyChoice::Zipf(1.2)));
        assert!("zipf:-1".parse::<KeyChoice>().is_err());
        assert!("x".parse::<KeyChoice>().is_err());
    }
}
