//! # duality-bench — benchmarks and experiments
//!
//! Every experiment measures duality and its peers *in the same run*, on the
//! same machine, and reports ratios against them. Each experiment lives in its
//! own module and returns rows that [`report`] prints as a Markdown table or
//! JSON.
//!
//! | module | command | question |
//! |---|---|---|
//! | [`tasks`] | `duality bench tasks` | bytes per task and yields/s: duality vs tokio, smol, OS threads |
//! | [`http`] | `duality bench http` | requests/s and Mbit/s vs clients: duality (Knot-C, Knot-A, SPED) vs nginx (seed 000, Figure 3) |
//! | [`balance`] | `duality bench balance` | seed 002's uneven load: how evenly the loops share the work under each accept balance, vs memcached |
//! | [`disk`] | `duality bench disk` | seed 004's disk test: N readers of random 4 KiB `O_DIRECT` blocks through the blocking pool or io_uring vs tokio and one OS thread each |
//! | [`disk_web`] | `duality bench disk --web` | seed 004's Fig. 19: the web server on a working set of many small files the page cache does not hold, vs nginx with and without `aio threads` |
//! | [`idle`] | `duality bench idle` | seed 004's FIFO-pipe test (Fig. 18): active pairs' throughput and memory per idle connection as idle connections grow, vs tokio and OS threads; the cache vs thread-per-conn, tokio and memcached |
//! | [`fairness`] | `duality bench fairness` | a newcomer's first answer while clients flood the server: every model vs memcached and nginx |
//! | [`store`] | `duality bench store` | the cache's memory under size waves, bytes per item, hit ratio under Zipf keys: vs memcached at the same `-m` |
//! | [`soak`] | `duality bench soak` | good clients beside floods, slowloris, resets and churn: errors, p99, memory over time |
//! | [`offload`] | `duality bench offload` | seed 002: 1% gzip requests inline, on the pool or adaptive, vs nginx `gzip on`: p99s of cheap and heavy requests, TTFB, accept latency, loop hold |
//! | [`sweep`] | `duality bench models --sweep` | seed 001 Fig. 2-5 and 7: the hand-off models over their thread counts, and each one's peak |
//! | [`models_echo`] | `duality bench models --service echo` | requests/s and context switches per request under every model |
//! | [`goals`] | `duality bench goals` | the open issues' benchmark goals, judged on the committed results files a manifest names |
//! | [`colors`] | `duality bench colors` | seed 003 Fig. 1: speed-up of per-client cryptography with per-client colors on 1..N threads vs N independent copies, and tokio with a mutex |

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod balance;
pub mod colors;
pub mod disk;
pub mod disk_web;
pub mod fairness;
pub mod goals;
pub mod http;
pub mod idle;
pub mod interrupt;
pub mod kv_tokio;
pub mod limits;
pub mod loadgen;
pub mod models_echo;
pub mod models_kv;
pub mod offload;
pub mod plot;
pub mod proc;
pub mod report;
pub mod servers;
pub mod soak;
pub mod store;
pub mod summary;
pub mod sweep;
pub mod tasks;
pub mod workload;
