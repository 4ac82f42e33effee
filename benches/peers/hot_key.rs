//! The hot-key workload (c) of the peers bench: every burst checked for exactly one run, per store
//! and paired with the DashMap design.

use super::throughput::{ops_per_sec, replay_cfg, Record, SETTLE};
use super::*;

/// (c) Hot key for store `S`: every burst is checked for exactly one run.
pub(super) fn hot_key<S: Store>(ctx: &mut Ctx, g: &mut BenchmarkGroup<'_, WallTime>) {
    let store = ctx.rt.block_on(async { Arc::new(S::build(&replay_cfg())) });
    let rec: Record = Arc::default();
    let all: Arc<Mutex<Bursts>> = Arc::default();
    g.bench_function(S::NAME, |b| {
        b.to_async(&ctx.rt).iter_custom(|iters| {
            let (store, rec, all) = (store.clone(), rec.clone(), all.clone());
            async move {
                let r = driver::hot_key(&store, iters).await;
                rec.lock().expect("record").push((iters, r.elapsed));
                let mut all = all.lock().expect("bursts");
                all.runs += r.runs;
                all.bursts += r.bursts;
                all.max_runs = all.max_runs.max(r.max_runs);
                r.elapsed
            }
        })
    });
    let Some(ops) = ops_per_sec(&rec, ctx.samples(), BURST as u64) else {
        return;
    };
    let bursts = if ctx.quick { 100 } else { 500 };
    let sample = ctx.rt.block_on(driver::hot_key(&store, bursts));
    let mut all = all.lock().expect("bursts");
    all.runs += sample.runs;
    all.bursts += sample.bursts;
    all.max_runs = all.max_runs.max(sample.max_runs);
    let mut times: Vec<f64> = sample.times.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    times.sort_by(f64::total_cmp);
    let p99 = times[((times.len() as f64 * 0.99).ceil() as usize).clamp(1, times.len()) - 1];
    let mut m = Map::new();
    m.insert(
        "runs_per_burst".into(),
        json!(round3(all.runs as f64 / all.bursts as f64)),
    );
    m.insert("max_runs_in_a_burst".into(), json!(all.max_runs));
    m.insert("bursts_checked".into(), json!(all.bursts));
    m.insert("burst_p50_us".into(), json!(round1(median(times))));
    m.insert("burst_p99_us".into(), json!(round1(p99)));
    m.insert("ops_per_sec".into(), json!(ops.round()));
    // Stores that keep results must run the action exactly once per burst. A single-flight group
    // keeps none: a call arriving after the run ended runs again, which the table reports.
    if all.max_runs != 1 && S::NAME != Singleflight::NAME {
        ctx.violations.push((S::NAME, all.max_runs));
    }
    drop(all);
    ctx.put("hot_key", S::NAME, m);
    ctx.retire(async move { drop(store) }, SETTLE);
}

/// Hot key with idem and the DashMap design alternated burst by burst: both stores built and
/// warmed, then 200 (quick) / 1,000 pairs of one burst each, which store goes first alternating;
/// the figure is the median of the pairs' ratios of burst times (lower is better). The
/// criterion figures above time the stores one after another, and on these VMs that moved the
/// hot-key ratio between 0.38× and 2.39× with one engine; a pair's two bursts are a millisecond
/// apart. Every burst is checked for exactly one run, as in `hot_key`.
pub(super) fn hot_key_paired(ctx: &mut Ctx) {
    let (idem, dash) = ctx.rt.block_on(async {
        let idem = Arc::new(Idem::build(&replay_cfg()));
        let dash = Arc::new(DashShared::build(&replay_cfg()));
        (idem, dash)
    });
    let warm = 20;
    let mut idem_runs = ctx.rt.block_on(driver::hot_key(&idem, warm)).max_runs;
    let mut dash_runs = ctx.rt.block_on(driver::hot_key(&dash, warm)).max_runs;
    let pairs = if ctx.quick { 200 } else { 1_000 };
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..pairs {
        let (mut x, mut y) = (0.0, 0.0);
        for idem_turn in [pair % 2 == 0, pair % 2 == 1] {
            if idem_turn {
                let b = ctx.rt.block_on(driver::hot_key(&idem, 1));
                idem_runs = idem_runs.max(b.max_runs);
                x = b.elapsed.as_secs_f64() * 1e6;
            } else {
                let b = ctx.rt.block_on(driver::hot_key(&dash, 1));
                dash_runs = dash_runs.max(b.max_runs);
                y = b.elapsed.as_secs_f64() * 1e6;
            }
        }
        ours.push(x);
        theirs.push(y);
        ratios.push(x / y);
    }
    for (name, runs) in [(Idem::NAME, idem_runs), (DashShared::NAME, dash_runs)] {
        if runs != 1 {
            ctx.violations.push((name, runs));
        }
    }
    let mut m = Map::new();
    m.insert("pairs".into(), json!(pairs));
    m.insert("burst_p50_us".into(), json!(round1(median(ours))));
    m.insert(
        "dashmap_shared_burst_p50_us".into(),
        json!(round1(median(theirs))),
    );
    m.insert("max_runs_in_a_burst".into(), json!(idem_runs));
    m.insert(
        "vs_dashmap_shared_paired".into(),
        json!(round3(median(ratios))),
    );
    ctx.put("hot_key_paired", Idem::NAME, m);
    ctx.retire(async move { drop((idem, dash)) }, SETTLE);
}
