//! idem's engine alone: workloads (a) replay and (b) unique for 1..32 shards (up to twice the CPUs
//! on a bigger machine) and 1, 2 and all worker threads. Writes `shard_scaling.csv` and
//! `shard_scaling.svg` under `target/idem-bench/` and says where each curve bends.
//!
//! `cargo bench -p idem-benches --bench shard_scaling`; `IDEM_BENCH_QUICK=1` for a short run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{BenchmarkId, Throughput};
use plotters::prelude::*;

// Shared with the peers bench; not every helper is used here.
#[allow(dead_code)]
#[path = "support/common.rs"]
mod common;
#[allow(dead_code)]
#[path = "support/driver.rs"]
mod driver;
#[allow(dead_code)]
#[path = "support/hist.rs"]
mod hist;
#[allow(dead_code)]
#[path = "peers/idem.rs"]
mod idem_store;
#[allow(dead_code)]
#[path = "support/store.rs"]
mod store;

use common::{fmt_ops, CLIENT_TASKS};
use idem_store::Idem;
use store::{Store, StoreConfig};

const WORKLOADS: [&str; 2] = ["replay", "unique"];

/// One measured point.
#[derive(Debug, Clone)]
struct Point {
    workload: &'static str,
    threads: usize,
    shards: usize,
    ops: f64,
}

fn config(workload: &str, shards: usize) -> StoreConfig {
    match workload {
        "replay" => StoreConfig {
            ttl: Duration::from_secs(3600),
            capacity: 1_000_000,
            shards: Some(shards),
        },
        _ => StoreConfig {
            ttl: Duration::from_secs(1),
            capacity: 8_000_000,
            shards: Some(shards),
        },
    }
}

fn measure(
    c: &mut criterion::Criterion,
    rt: &tokio::runtime::Runtime,
    workload: &'static str,
    threads: usize,
    shard_counts: &[usize],
    samples: usize,
    out: &mut Vec<Point>,
) {
    let mut g = c.benchmark_group(format!("scaling_{workload}_{threads}t"));
    g.throughput(Throughput::Elements(CLIENT_TASKS as u64));
    for &shards in shard_counts {
        let cfg = config(workload, shards);
        let (store, keys) = rt.block_on(async {
            let store = Arc::new(Idem::build(&cfg));
            let keys = if workload == "replay" {
                Some(driver::prefill(&store).await)
            } else {
                None
            };
            (store, keys)
        });
        let rec: Arc<Mutex<Vec<(u64, Duration)>>> = Arc::default();
        g.bench_function(BenchmarkId::from_parameter(shards), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (store, keys, rec) = (store.clone(), keys.clone(), rec.clone());
                async move {
                    let run = match &keys {
                        Some(keys) => driver::replay(&store, keys, iters, false).await,
                        None => driver::unique(&store, iters, false).await,
                    };
                    rec.lock().expect("record").push((iters, run.elapsed));
                    run.elapsed
                }
            })
        });
        let rec = rec.lock().expect("record");
        if !rec.is_empty() {
            // Sustained: all measured calls over all measured time, so the engine's expiry work
            // (unique keys live 1 s) counts wherever it lands.
            let tail = &rec[rec.len().saturating_sub(samples)..];
            let calls: u64 = tail.iter().map(|(i, _)| i * CLIENT_TASKS as u64).sum();
            let secs: f64 = tail.iter().map(|(_, d)| d.as_secs_f64()).sum();
            let ops = calls as f64 / secs;
            out.push(Point {
                workload,
                threads,
                shards,
                ops,
            });
        }
        // Let the engine's actors drain and its last results expire before the next point.
        rt.block_on(async move {
            drop((store, keys));
            tokio::time::sleep(Duration::from_millis(1_500)).await;
        });
    }
    g.finish();
}

/// Where a curve bends: the fewest shards that reach 90% of the curve's peak (robust to the
/// noise of single points, unlike a per-doubling gain), and what happens after the peak.
fn bend(series: &[(usize, f64)]) -> String {
    let Some(&(peak_s, peak)) = series.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return "no data".into();
    };
    let knee = series
        .iter()
        .find(|(_, o)| *o >= 0.9 * peak)
        .map_or(peak_s, |(s, _)| *s);
    let last = series.last().map_or(peak, |l| l.1);
    format!(
        "flattens at {knee} shards (first within 10% of the peak); peak {} ops/s at {peak_s}; \
         at {} shards {:+.0}% from the peak",
        fmt_ops(peak),
        series.last().map_or(0, |l| l.0),
        (last / peak - 1.0) * 100.0
    )
}

fn plot(
    path: &std::path::Path,
    points: &[Point],
    threads: &[usize],
    max_shards: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1100, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, 2));
    let xmax = (max_shards as f64).log2();
    for (area, workload) in areas.iter().zip(WORKLOADS) {
        let ymax = points
            .iter()
            .filter(|p| p.workload == workload)
            .map(|p| p.ops)
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("idem {workload}: ops/s vs shards"),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.2f64..xmax + 0.2, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_desc("shards (log2 scale)")
            .y_desc("ops/s, 256 client tasks")
            .x_labels(xmax as usize + 1)
            .x_label_formatter(&|x| format!("{}", 2f64.powf(*x).round()))
            .y_label_formatter(&|y| format!("{:.0}k", y / 1000.0))
            .draw()?;
        for (i, &t) in threads.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.workload == workload && p.threads == t)
                .map(|p| ((p.shards as f64).log2(), p.ops))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(format!(
                    "{t} worker thread{}",
                    if t == 1 { "" } else { "s" }
                ))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn main() {
    let quick = common::quick();
    let (cpus, model) = common::machine();
    let mut threads = vec![1, 2];
    if cpus > 2 {
        threads.push(cpus);
    }
    let max_shards = 32.max((2 * cpus).next_power_of_two());
    let shard_counts: Vec<usize> = (0..=max_shards.trailing_zeros()).map(|i| 1 << i).collect();
    println!(
        "idem shard scaling: {} mode; {cpus} CPUs ({model}); threads {threads:?}; shards {shard_counts:?}",
        if quick { "QUICK" } else { "full" }
    );
    let samples = if quick { 10 } else { 20 };
    let mut c = common::criterion(quick);
    let mut points = Vec::new();
    for &t in &threads {
        let rt = common::runtime(t);
        for workload in WORKLOADS {
            measure(
                &mut c,
                &rt,
                workload,
                t,
                &shard_counts,
                samples,
                &mut points,
            );
        }
        rt.shutdown_timeout(Duration::from_secs(2));
    }

    let dir = common::out_dir();
    let mut csv = String::from("workload,worker_threads,shards,ops_per_sec\n");
    for p in &points {
        let _ = writeln!(
            csv,
            "{},{},{},{:.0}",
            p.workload, p.threads, p.shards, p.ops
        );
    }
    let csv_path = dir.join("shard_scaling.csv");
    std::fs::write(&csv_path, csv).expect("write shard_scaling.csv");
    let svg_path = dir.join("shard_scaling.svg");
    if let Err(e) = plot(&svg_path, &points, &threads, max_shards) {
        eprintln!("plot failed: {e}");
    }

    println!();
    println!("## shard scaling (idem, ops/s over {CLIENT_TASKS} client tasks)");
    let mut header = String::from("| workload | worker threads |");
    let mut rule = String::from("|---|---:|");
    for s in &shard_counts {
        let _ = write!(header, " {s} |");
        rule.push_str("---:|");
    }
    println!("{header} where it bends |");
    println!("{rule}---|");
    let mut by: BTreeMap<(&str, usize), Vec<(usize, f64)>> = BTreeMap::new();
    for p in &points {
        by.entry((p.workload, p.threads))
            .or_default()
            .push((p.shards, p.ops));
    }
    for workload in WORKLOADS {
        for &t in &threads {
            let Some(series) = by.get(&(workload, t)) else {
                continue;
            };
            let mut row = format!("| {workload} | {t} |");
            for s in &shard_counts {
                let cell = series
                    .iter()
                    .find(|(n, _)| n == s)
                    .map_or_else(|| "-".into(), |(_, o)| fmt_ops(*o));
                let _ = write!(row, " {cell} |");
            }
            println!("{row} {} |", bend(series));
        }
    }
    println!();
    println!("csv: {}", csv_path.display());
    println!("svg: {}", svg_path.display());
}
