//! The open issues' benchmark goals, read back from committed results.
//!
//! Each experiment prints the figures a goal is judged on, in its own
//! table; `duality bench goals` gathers the verdicts in one place. A
//! manifest names, for each kind of run, the results file that stands for
//! it (the newest committed run of that experiment); each file is read with
//! the row types that wrote it, and each goal is judged from the rows the
//! same way every time. The table it prints is what the README's goal
//! section holds, so that section is always a command's output and a goal
//! reads "met" only where a committed file says so.

use crate::models_kv::KvRow;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

/// One goal, judged on one results file.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The issue that sets the goal.
    pub issue: u32,
    /// The goal, in words, with the setup it is judged on.
    pub goal: String,
    /// The figure it is judged on.
    pub figure: String,
    /// Whether the figure meets the goal.
    pub met: bool,
}

/// What a results file measured: decides how it is read and which goals
/// apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `bench models` (the cache, Unix sockets, one request in flight):
    /// issue 10's hand-off, CPU and tokio goals.
    Cache,
    /// The same with `--pipeline 16`: the hand-off models against `sped`.
    CachePipelined,
    /// `bench models --service echo`, one request in flight.
    Echo,
    /// The same with `--pipeline 16`.
    EchoPipelined,
    /// `bench models --tcp` with io_uring rows: issue 11's CPU and
    /// throughput goals against memcached.
    CacheTcp,
    /// The same with `--pipeline 16`.
    CacheTcpPipelined,
    /// `bench http`: issue 11's requests/s against nginx.
    Http,
    /// `bench fairness`: a newcomer's first answer beside floods.
    Fairness,
    /// `bench idle`: its own goals (issue 16).
    Idle,
    /// `bench colors`: the N-copy bound (issue 16).
    Colors,
    /// `bench offload`: its own goals (issue 12).
    Offload,
}

impl Kind {
    /// Every kind, as a manifest names it.
    pub const ALL: [(Kind, &'static str); 11] = [
        (Kind::Cache, "cache"),
        (Kind::CachePipelined, "cache-pipelined"),
        (Kind::Echo, "echo"),
        (Kind::EchoPipelined, "echo-pipelined"),
        (Kind::CacheTcp, "cache-tcp"),
        (Kind::CacheTcpPipelined, "cache-tcp-pipelined"),
        (Kind::Http, "http"),
        (Kind::Fairness, "fairness"),
        (Kind::Idle, "idle"),
        (Kind::Colors, "colors"),
        (Kind::Offload, "offload"),
    ];

    /// The kind's name in a manifest.
    pub fn name(self) -> &'static str {
        Kind::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("?", |(_, n)| n)
    }
}

impl std::str::FromStr for Kind {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Kind> {
        match Kind::ALL.iter().find(|(_, n)| *n == s) {
            Some((k, _)) => Ok(*k),
            None => bail!(
                "unknown kind {s:?}: one of {}",
                Kind::ALL.map(|(_, n)| n).join(", ")
            ),
        }
    }
}

/// One manifest line: a kind and the file that stands for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// What the file measured.
    pub kind: Kind,
    /// The file, as the manifest names it (relative to the manifest).
    pub path: PathBuf,
}

/// Reads a manifest: one `KIND PATH` per line; `#` starts a comment.
pub fn parse_manifest(text: &str) -> anyhow::Result<Vec<Source>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(kind), Some(path), None) = (words.next(), words.next(), words.next()) else {
            bail!("line {}: expected `KIND PATH`, got {line:?}", i + 1);
        };
        let kind = kind.parse().with_context(|| format!("line {}", i + 1))?;
        out.push(Source {
            kind,
            path: path.into(),
        });
    }
    Ok(out)
}

/// Judges every goal of `kind` on the JSON a run of it wrote.
pub fn check(kind: Kind, json: &str) -> anyhow::Result<Vec<Check>> {
    Ok(match kind {
        Kind::Cache => cache(&serde_json::from_str::<Vec<_>>(json)?),
        Kind::CachePipelined => cache_pipelined(&serde_json::from_str::<Vec<_>>(json)?),
        Kind::Echo | Kind::EchoPipelined => echo(&serde_json::from_str::<Vec<_>>(json)?, kind),
        Kind::CacheTcp | Kind::CacheTcpPipelined => {
            cache_tcp(&serde_json::from_str::<Vec<_>>(json)?)
        }
        Kind::Http => http(&serde_json::from_str::<Vec<_>>(json)?),
        Kind::Fairness => fairness(&serde_json::from_str::<Vec<_>>(json)?),
        Kind::Idle => idle(&serde_json::from_str(json)?),
        Kind::Colors => crate::colors::goal_checks(&serde_json::from_str::<Vec<_>>(json)?)
            .into_iter()
            // The goal is duality's; tokio is the run's conventional peer.
            .filter(|(setup, _, _)| setup != "tokio")
            .map(|(setup, of_bound, n)| Check {
                issue: 16,
                goal: format!(
                    "colors {setup}: ≥ {} of the N-copy bound at every N ≥ 2",
                    crate::colors::GOAL
                ),
                figure: format!("lowest {} (N = {n})", near(of_bound, crate::colors::GOAL)),
                met: of_bound >= crate::colors::GOAL,
            })
            .collect(),
        Kind::Offload => crate::offload::goals(&serde_json::from_str::<Vec<_>>(json)?)
            .into_iter()
            .map(|g| Check {
                issue: 12,
                goal: format!("offload {}%: {} {}", g.load_pct, g.what, g.target),
                figure: g.ratio.map_or("not measured".into(), |r| format!("{r:.2}")),
                met: g.met,
            })
            .collect(),
    })
}

/// Reads every file the manifest at `manifest` names and judges its goals.
pub fn check_all(manifest: &Path) -> anyhow::Result<Vec<(Source, Vec<Check>)>> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let base = manifest.parent().unwrap_or(Path::new("."));
    parse_manifest(&text)?
        .into_iter()
        .map(|s| {
            let file = base.join(&s.path);
            let json = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let what = || {
                format!(
                    "{} is not a `{}` results file",
                    file.display(),
                    s.kind.name()
                )
            };
            let checks = check(s.kind, &json).with_context(what)?;
            // Rows of another run can parse as this kind's and hold none
            // of its setups: a goal must not drop out of the table unseen.
            if checks.is_empty() {
                bail!("{}: no goal could be judged on its rows", what());
            }
            Ok((s, checks))
        })
        .collect()
}

/// Every verdict with its source, by issue, then in manifest order.
fn in_order(all: &[(Source, Vec<Check>)]) -> Vec<(&Source, &Check)> {
    let mut rows: Vec<(&Source, &Check)> = all
        .iter()
        .flat_map(|(s, cs)| cs.iter().map(move |c| (s, c)))
        .collect();
    rows.sort_by_key(|(_, c)| c.issue);
    rows
}

/// The verdicts as a JSON array, in [`table`]'s order: `issue`, `goal`,
/// `figure`, `met` and `from` (the file, as the manifest names it).
pub fn json(all: &[(Source, Vec<Check>)]) -> String {
    let rows: Vec<serde_json::Value> = in_order(all)
        .into_iter()
        .map(|(src, c)| {
            serde_json::json!({
                "issue": c.issue,
                "goal": c.goal,
                "figure": c.figure,
                "met": c.met,
                "from": src.path.display().to_string(),
            })
        })
        .collect();
    crate::report::json(&rows)
}

/// The verdicts as a Markdown table, by issue, then in manifest order.
pub fn table(all: &[(Source, Vec<Check>)]) -> String {
    let rows = in_order(all);
    let met = rows.iter().filter(|(_, c)| c.met).count();
    let mut s = format!(
        "{met} of {} goals met.\n\n| issue | goal | figure | met | from |\n|---|---|---|---|---|\n",
        rows.len()
    );
    for (src, c) in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | `{}` |\n",
            c.issue,
            c.goal.replace('|', "\\|"),
            c.figure.replace('|', "\\|"),
            if c.met { "yes" } else { "**no**" },
            src.path.display()
        ));
    }
    s
}

/// The hand-off models: `amped`, `seda`, `seda-s`, either policy.
fn is_handoff(model: &str) -> bool {
    let m = model.strip_prefix("duality ").unwrap_or(model);
    ["amped", "seda", "seda-s"]
        .iter()
        .any(|h| m.strip_prefix(h).is_some_and(|r| r.starts_with(':')))
}

/// Servers in first-seen order.
fn servers<'r>(names: impl Iterator<Item = &'r str>) -> Vec<&'r str> {
    let mut out: Vec<&str> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// `r` to two decimals, or to as many more as it takes not to round it
/// onto `goal` (a 0.998 printed "1.00" beside "not met" reads as a
/// contradiction).
fn near(r: f64, goal: f64) -> String {
    for d in 2..=6 {
        let shown = format!("{r:.d$}");
        if r == goal || shown != format!("{goal:.d$}") {
            return shown;
        }
    }
    format!("{r}")
}

/// The lowest of `(ratio, clients)` pairs, as "lowest 0.57x (20 clients)",
/// printed for a goal of `goal`.
fn lowest(points: impl Iterator<Item = (f64, usize)>, goal: f64) -> Option<(f64, String)> {
    points
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(r, c)| (r, format!("lowest {}x ({c} clients)", near(r, goal))))
}

/// Every hand-off server at ≥ 1.0x its yardstick from 8 clients up.
fn handoff_checks<'r>(
    rows: impl Iterator<Item = (&'r str, usize, Option<f64>)> + Clone,
    yardstick: &str,
    what: &str,
) -> Vec<Check> {
    let mut out = Vec::new();
    for who in servers(rows.clone().map(|r| r.0).filter(|s| is_handoff(s))) {
        let points = rows
            .clone()
            .filter(|r| r.0 == who && r.1 >= 8)
            .filter_map(|r| Some((r.2?, r.1)));
        if let Some((r, figure)) = lowest(points, 1.0) {
            out.push(Check {
                issue: 10,
                goal: format!("{what} {who}: ≥ 1.0x {yardstick} from 8 clients up"),
                figure,
                met: r >= 1.0,
            });
        }
    }
    out
}

/// The first row of `server` at `clients`.
fn at<'r>(rows: &'r [KvRow], server: &str, clients: usize) -> Option<&'r KvRow> {
    rows.iter()
        .find(|r| r.server == server && r.clients == clients)
}

/// Issue 10 on the cache, one request in flight: the hand-off models
/// against `symped`; every `symped` row's CPU per transaction at 40 and 120
/// clients against `memcached -t 1`'s and the tokio peer's, and its
/// transactions/s against the tokio peer's from 8 clients up.
fn cache(rows: &[KvRow]) -> Vec<Check> {
    let mut out = handoff_checks(
        rows.iter()
            .map(|r| (r.server.as_str(), r.clients, r.vs_symped)),
        "symped",
        "cache",
    );
    let tokio = rows
        .iter()
        .find(|r| r.server.starts_with("tokio"))
        .map(|r| r.server.as_str());
    let symped = servers(
        rows.iter()
            .map(|r| r.server.as_str())
            .filter(|s| s.starts_with("duality symped:")),
    );
    for who in symped {
        let points: Vec<(usize, f64)> = [40, 120]
            .iter()
            .filter_map(|&c| Some((c, at(rows, who, c)?.cpu_vs_memcached?)))
            .collect();
        if !points.is_empty() {
            out.push(Check {
                issue: 10,
                goal: format!(
                    "cache {who}: CPU per transaction ≤ memcached -t 1's at 40 and 120 clients"
                ),
                figure: figures(
                    points
                        .iter()
                        .map(|&(c, r)| format!("{}x at {c}", near(r, 1.0))),
                ),
                met: points.len() == 2 && points.iter().all(|p| p.1 <= 1.0),
            });
        }
        let Some(tokio) = tokio else { continue };
        let cpu: Vec<(usize, f64, f64)> = [40, 120]
            .iter()
            .filter_map(|&c| {
                Some((
                    c,
                    at(rows, who, c)?.cpu_us_per_txn,
                    at(rows, tokio, c)?.cpu_us_per_txn,
                ))
            })
            .collect();
        if !cpu.is_empty() {
            out.push(Check {
                issue: 10,
                goal: format!(
                    "cache {who}: CPU per transaction below {tokio}'s at 40 and 120 clients"
                ),
                figure: figures(
                    cpu.iter()
                        .map(|&(c, d, t)| format!("{d:.2} vs {t:.2} µs at {c}")),
                ),
                met: cpu.len() == 2 && cpu.iter().all(|p| p.1 < p.2),
            });
        }
        // `vs_symped` of the tokio row is tokio over the first symped row,
        // per round: its inverse is that symped row over tokio.
        let first_symped = rows.iter().find(|r| r.server.starts_with("duality symped"));
        if first_symped.is_some_and(|r| r.server == who) {
            let points = rows
                .iter()
                .filter(|r| r.server == tokio && r.clients >= 8)
                .filter_map(|r| Some((1.0 / r.vs_symped.filter(|v| *v > 0.0)?, r.clients)));
            if let Some((r, figure)) = lowest(points, 1.1) {
                out.push(Check {
                    issue: 10,
                    goal: format!("cache {who}: ≥ 1.1x {tokio}'s transactions/s from 8 clients up"),
                    figure,
                    met: r >= 1.1,
                });
            }
        }
    }
    out
}

/// Issue 10 on the cache with requests pipelined: the hand-off models
/// against `sped`.
fn cache_pipelined(rows: &[KvRow]) -> Vec<Check> {
    handoff_checks(
        rows.iter()
            .map(|r| (r.server.as_str(), r.clients, r.vs_sped)),
        "sped",
        "cache, 16 pipelined,",
    )
}

/// Issue 10 on the echo service: the hand-off models against `symped`
/// (one request in flight) or `sped` (pipelined).
fn echo(rows: &[crate::models_echo::EchoRow], kind: Kind) -> Vec<Check> {
    let pipelined = kind == Kind::EchoPipelined;
    handoff_checks(
        rows.iter().map(|r| {
            (
                r.model.as_str(),
                r.connections,
                if pipelined { r.vs_sped } else { r.vs_symped },
            )
        }),
        if pipelined { "sped" } else { "symped" },
        if pipelined {
            "echo, 16 pipelined,"
        } else {
            "echo"
        },
    )
}

/// Issue 11 on the cache over TCP: the io_uring rows' lowest CPU per
/// transaction at ≤ 0.75x `memcached -t 1`'s, and their best
/// transactions/s at ≥ 1.25x the best memcached row's, at each client count.
fn cache_tcp(rows: &[KvRow]) -> Vec<Check> {
    let mut clients: Vec<usize> = rows.iter().map(|r| r.clients).collect();
    clients.sort_unstable();
    clients.dedup();
    let uring = |r: &&KvRow| r.server.starts_with("duality") && r.server.ends_with("@uring");
    let mut cpu = Vec::new();
    let mut tps = Vec::new();
    for c in clients {
        let here = || rows.iter().filter(move |r| r.clients == c);
        let cheapest = here()
            .filter(uring)
            .filter_map(|r| Some((r.cpu_vs_memcached?, r)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((r, row)) = cheapest {
            cpu.push((c, r, row.server.clone()));
        }
        let best = |f: &dyn Fn(&&KvRow) -> bool| {
            here()
                .filter(|r| f(r))
                .max_by(|a, b| a.tps_mean.total_cmp(&b.tps_mean))
        };
        if let (Some(d), Some(m)) = (best(&uring), best(&|r| r.server.starts_with("memcached"))) {
            tps.push((
                c,
                d.tps_mean / m.tps_mean,
                d.server.clone(),
                m.server.clone(),
            ));
        }
    }
    let mut out = Vec::new();
    if !cpu.is_empty() {
        out.push(Check {
            issue: 11,
            goal: "cache over TCP, io_uring: CPU per transaction ≤ 0.75x memcached -t 1's".into(),
            figure: figures(
                cpu.iter()
                    .map(|(c, r, who)| format!("{}x at {c} ({who})", near(*r, 0.75))),
            ),
            met: cpu.iter().all(|p| p.1 <= 0.75),
        });
    }
    if !tps.is_empty() {
        out.push(Check {
            issue: 11,
            goal: "cache over TCP, io_uring: transactions/s ≥ 1.25x the best memcached's".into(),
            figure: figures(
                tps.iter()
                    .map(|(c, r, d, m)| format!("{}x at {c} ({d} / {m})", near(*r, 1.25))),
            ),
            met: tps.iter().all(|p| p.1 >= 1.25),
        });
    }
    out
}

/// Issue 11 on the web server: the best duality row at ≥ 1.25x the best
/// nginx row's requests/s, per file and client count.
fn http(rows: &[crate::http::HttpRow]) -> Vec<Check> {
    let mut points: Vec<(&str, usize)> = Vec::new();
    for r in rows {
        if !points.contains(&(r.file.as_str(), r.clients)) {
            points.push((r.file.as_str(), r.clients));
        }
    }
    let mut out = Vec::new();
    for (file, clients) in points {
        let best = |prefix: &str| {
            rows.iter()
                .filter(|r| r.file == file && r.clients == clients && r.server.starts_with(prefix))
                .filter_map(|r| Some((r.requests_per_sec?, r.server.as_str())))
                .max_by(|a, b| a.0.total_cmp(&b.0))
        };
        if let (Some(d), Some(n)) = (best("duality"), best("nginx")) {
            let r = d.0 / n.0;
            out.push(Check {
                issue: 11,
                goal: format!(
                    "http {file} at {clients} clients: ≥ 1.25x the best nginx's requests/s"
                ),
                figure: format!("{}x ({} / {})", near(r, 1.25), d.1, n.1),
                met: r >= 1.25,
            });
        }
    }
    out
}

/// Issue 10's fairness: under every duality model, a newcomer's first
/// answer in ≤ 10 ms at the median beside the floods, and every newcomer
/// answered.
fn fairness(rows: &[crate::fairness::FairnessRow]) -> Vec<Check> {
    let services = servers(rows.iter().map(|r| r.service.as_str()));
    services
        .into_iter()
        .filter_map(|svc| {
            let ours = || {
                rows.iter()
                    .filter(move |r| r.service == svc && r.server.starts_with("duality"))
            };
            let worst = ours().max_by(|a, b| a.p50_ms.total_cmp(&b.p50_ms))?;
            let failed: usize = ours().map(|r| r.failed).sum();
            Some(Check {
                issue: 10,
                goal: format!(
                    "fairness, {svc}: a newcomer's first answer ≤ 10 ms at the median under every model"
                ),
                figure: format!(
                    "worst {:.2} ms ({}), {failed} unanswered",
                    worst.p50_ms, worst.server
                ),
                met: worst.p50_ms <= 10.0 && failed == 0,
            })
        })
        .collect()
}

/// The idle bench's own goals (issue 16), and issue 10's memory goal:
/// beside 5,000 idle cache connections, every duality server's resident
/// bytes per idle connection at most 2 KiB over memcached's.
fn idle(r: &crate::idle::Results) -> Vec<Check> {
    let mut out: Vec<Check> = crate::idle::goals(r)
        .into_iter()
        .map(|g| Check {
            issue: 16,
            goal: g.goal,
            figure: g.detail,
            met: g.met,
        })
        .collect();
    let at_5000 = |prefix: &'static str| {
        r.cache
            .iter()
            .filter(move |c| c.server.starts_with(prefix) && c.idle == 5000 && c.held == 5000)
    };
    let Some((mc, mc_bytes)) =
        at_5000("memcached").find_map(|c| Some((c.server.as_str(), c.bytes_per_idle?)))
    else {
        return out;
    };
    for c in at_5000("duality") {
        let Some(b) = c.bytes_per_idle else { continue };
        out.push(Check {
            issue: 10,
            goal: format!(
                "cache {}: memory per idle connection ≤ {mc}'s + 2 KiB at 5,000 idle",
                c.server
            ),
            figure: format!("{b:.0} B vs {mc_bytes:.0} B"),
            met: b <= mc_bytes + 2048.0,
        });
    }
    out
}

/// Figures joined with "; ".
fn figures(parts: impl Iterator<Item = String>) -> String {
    parts.collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(server: &str, clients: usize, tps: f64, cpu: f64) -> KvRow {
        KvRow::for_test(server, clients, tps, cpu)
    }

    #[test]
    fn a_manifest_names_kinds_and_files() {
        let m =
            parse_manifest("# comment\ncache models/a.json  # the main run\n\nidle x/idle.json\n")
                .unwrap();
        assert_eq!(
            m,
            vec![
                Source {
                    kind: Kind::Cache,
                    path: "models/a.json".into()
                },
                Source {
                    kind: Kind::Idle,
                    path: "x/idle.json".into()
                },
            ]
        );
        let e = parse_manifest("cache\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let e = parse_manifest("caches a.json\n").unwrap_err();
        assert!(format!("{e:#}").contains("unknown kind"), "{e:#}");
    }

    #[test]
    fn hand_off_models_are_judged_from_8_clients_up_on_their_lowest_ratio() {
        let mut rows = Vec::new();
        for (c, r) in [(1, 0.2), (8, 1.05), (40, 0.98)] {
            let mut row = kv("duality amped:1", c, 1.0, 1.0);
            row.vs_symped = Some(r);
            rows.push(row);
        }
        let mut ok = kv("duality seda:1:1/adaptive", 8, 1.0, 1.0);
        ok.vs_symped = Some(1.01);
        rows.push(ok);
        rows.push(kv("duality symped:2", 8, 1.0, 1.0));
        let checks = cache(&rows);
        let amped = checks.iter().find(|c| c.goal.contains("amped:1")).unwrap();
        assert!(!amped.met);
        assert_eq!(amped.figure, "lowest 0.98x (40 clients)");
        let seda = checks.iter().find(|c| c.goal.contains("seda:1:1")).unwrap();
        assert!(seda.met, "{seda:?}");
        assert!(!checks.iter().any(|c| c.goal.contains("symped:2: ≥ 1.0x")));
    }

    #[test]
    fn the_cache_cpu_and_tokio_goals() {
        let mut rows = Vec::new();
        for (c, cpu, vs_mc, tokio_cpu, tokio_vs) in [
            (8, 5.0, 1.4, 5.0, 0.80),
            (40, 4.0, 0.99, 4.1, 0.90),
            (120, 3.5, 1.02, 3.6, 0.95),
        ] {
            let mut s = kv("duality symped:2", c, 100.0, cpu);
            s.cpu_vs_memcached = Some(vs_mc);
            rows.push(s);
            let mut t = kv("tokio -t 2", c, 90.0, tokio_cpu);
            t.vs_symped = Some(tokio_vs);
            rows.push(t);
        }
        let checks = cache(&rows);
        let by = |s: &str| checks.iter().find(|c| c.goal.contains(s)).unwrap();
        let mc = by("≤ memcached -t 1's");
        assert!(!mc.met, "1.02 at 120 is above");
        assert_eq!(mc.figure, "0.99x at 40; 1.02x at 120");
        assert!(by("below tokio -t 2's").met);
        let t = by("1.1x tokio");
        // 1 / 0.95 = 1.05 at 120 clients is the lowest.
        assert!(!t.met);
        assert_eq!(t.figure, "lowest 1.05x (120 clients)");
        rows.iter_mut()
            .filter(|r| r.server.starts_with("tokio"))
            .for_each(|r| r.vs_symped = Some(0.9));
        assert!(cache(&rows)
            .iter()
            .any(|c| c.goal.contains("1.1x tokio") && c.met));
    }

    #[test]
    fn the_tcp_goals_take_the_cheapest_and_fastest_io_uring_rows() {
        let mut rows = Vec::new();
        for (server, tps, vs_mc) in [
            ("duality symped:1@uring", 130.0, Some(0.74)),
            ("duality symped:2@uring", 120.0, Some(0.90)),
            ("duality sped@epoll", 200.0, Some(0.50)),
            ("memcached -t 1", 90.0, Some(1.0)),
            ("memcached -t 2", 100.0, Some(1.1)),
        ] {
            let mut r = kv(server, 40, tps, 1.0);
            r.cpu_vs_memcached = vs_mc;
            rows.push(r);
        }
        let checks = cache_tcp(&rows);
        assert!(checks[0].met, "{:?}", checks[0]);
        assert_eq!(checks[0].figure, "0.74x at 40 (duality symped:1@uring)");
        assert!(checks[1].met, "1.30x the best memcached's: {:?}", checks[1]);
        rows[0].tps_mean = 110.0;
        let checks = cache_tcp(&rows);
        assert!(!checks[1].met, "epoll rows do not count: {:?}", checks[1]);
        assert_eq!(
            checks[1].figure,
            "1.20x at 40 (duality symped:2@uring / memcached -t 2)"
        );
    }

    #[test]
    fn the_http_goal_compares_best_rows_per_point() {
        let row = |server: &str, file: &str, clients, rps| crate::http::HttpRow {
            server: server.into(),
            file: file.into(),
            clients,
            requests_per_sec: rps,
            mbit_per_sec: None,
            cpu_us_per_request: None,
            errors: 0,
            connected: 0,
            failed: None,
        };
        let rows = vec![
            row("duality-knot-c@uring", "1KiB", 100, Some(130.0)),
            row("duality-knot-c@epoll", "1KiB", 100, Some(120.0)),
            row("nginx-1w", "1KiB", 100, Some(100.0)),
            row("nginx-2w", "1KiB", 100, Some(110.0)),
            row("duality-knot-c@uring", "16KiB", 100, None),
            row("nginx-2w", "16KiB", 100, Some(110.0)),
        ];
        let checks = http(&rows);
        assert_eq!(checks.len(), 1, "a failed duality point has no verdict");
        assert!(!checks[0].met);
        assert_eq!(checks[0].figure, "1.18x (duality-knot-c@uring / nginx-2w)");
    }

    #[test]
    fn fairness_takes_the_worst_model_and_counts_the_unanswered() {
        let row = |server: &str, p50, failed| crate::fairness::FairnessRow {
            service: "kv".into(),
            server: server.into(),
            floods: 4,
            samples: 30,
            p50_ms: p50,
            p90_ms: p50,
            max_ms: p50,
            failed,
        };
        let mut rows = vec![
            row("duality sped", 3.0, 0),
            row("duality amped:1", 9.5, 0),
            row("memcached -t 2", 50.0, 0),
        ];
        let c = &fairness(&rows)[0];
        assert!(c.met, "memcached's figure is not ours: {c:?}");
        assert_eq!(c.figure, "worst 9.50 ms (duality amped:1), 0 unanswered");
        rows[0].failed = 1;
        assert!(!fairness(&rows)[0].met);
    }

    #[test]
    fn idle_memory_is_judged_against_memcached_at_5000_plus_2_kib() {
        let row = |server: &str, idle: u64, held: u64, bytes: f64| -> crate::idle::CacheRow {
            serde_json::from_value(serde_json::json!({
                "server": server, "idle": idle, "held": held, "active": 40, "tps": 1.0,
                "vs_idle_free": 1.0, "p99_us": 1, "cpu_us_per_txn": 1.0,
                "rss_start_mib": 1.0, "rss_idle_mib": 1.0, "bytes_per_idle": bytes,
                "rss_closed_mib": 1.0, "closed_vs_start": 1.0, "client_cores": 1.0
            }))
            .unwrap()
        };
        let r = crate::idle::Results {
            cache: vec![
                row("memcached -t 2", 5000, 5000, 600.0),
                row("duality symped:2", 5000, 5000, 2648.0),
                row("duality big", 5000, 5000, 2649.0),
                row("duality short", 5000, 4000, 100.0),
                row("duality symped:2", 1000, 1000, 9999.0),
            ],
            ..Default::default()
        };
        let c: Vec<Check> = idle(&r).into_iter().filter(|c| c.issue == 10).collect();
        assert_eq!(c.len(), 2, "only rows that held all 5,000: {c:?}");
        assert!(c[0].met && c[0].goal.contains("symped:2"), "{:?}", c[0]);
        assert_eq!(c[0].figure, "2648 B vs 600 B");
        assert!(!c[1].met, "{:?}", c[1]);
    }

    #[test]
    fn a_figure_next_to_its_goal_keeps_the_digit_that_decides() {
        assert_eq!(near(0.998, 1.0), "0.998");
        assert_eq!(near(1.004, 1.0), "1.004");
        assert_eq!(near(1.0, 1.0), "1.00");
        assert_eq!(near(0.97, 1.0), "0.97");
        assert_eq!(near(0.7496, 0.75), "0.7496");
        assert_eq!(near(0.7504, 0.75), "0.7504");
    }

    #[test]
    fn the_table_counts_and_orders_by_issue() {
        let src = |p: &str| Source {
            kind: Kind::Cache,
            path: p.into(),
        };
        let check = |issue, met| Check {
            issue,
            goal: "g | h".into(),
            figure: "f".into(),
            met,
        };
        let t = table(&[
            (src("a.json"), vec![check(16, true)]),
            (src("b.json"), vec![check(10, false)]),
        ]);
        assert!(t.starts_with("1 of 2 goals met.\n"), "{t}");
        let j: serde_json::Value = serde_json::from_str(&json(&[
            (src("a.json"), vec![check(16, true)]),
            (src("b.json"), vec![check(10, false)]),
        ]))
        .unwrap();
        assert_eq!(j[0]["issue"], 10);
        assert_eq!(j[0]["met"], false);
        assert_eq!(j[0]["from"], "b.json");
        assert_eq!(j[1]["goal"], "g | h");
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with("| 1")).collect();
        assert_eq!(lines[0], "| 10 | g \\| h | f | **no** | `b.json` |");
        assert_eq!(lines[1], "| 16 | g \\| h | f | yes | `a.json` |");
    }
}
