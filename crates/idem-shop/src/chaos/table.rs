//! The final table of a chaos run: what was tried, what was injected, what the servers did and
//! what came of each intent.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use idem_retry::{Failure, GiveUp};

use super::ChaosReport;

impl ChaosReport {
    /// The final table.
    pub fn table(&self) -> String {
        let c = &self.client;
        let e = &self.engine.outcomes;
        let p = &self.proxy;
        let gave_up_created = self
            .results
            .iter()
            .filter(|r| r.outcome.is_err())
            .filter(|r| self.orders.get(&r.intent).is_some_and(|o| !o.is_empty()))
            .count();
        let rows: Vec<(String, String)> = vec![
            ("business intents".into(), self.results.len().to_string()),
            ("concurrent clients".into(), self.clients.to_string()),
            (
                "server instances".into(),
                match self.tier {
                    None => "1 (embedded engine)".to_owned(),
                    Some(_) => format!("{} (sharing one Redis)", self.instances),
                },
            ),
            ("attempts".into(), c.retrier.attempts.to_string()),
            ("retries".into(), c.retrier.retries.to_string()),
            (
                "  after a dropped connection".into(),
                c.retries(Failure::Transport).to_string(),
            ),
            (
                "  after a slow answer (timeout)".into(),
                c.retries(Failure::Timeout).to_string(),
            ),
            (
                "  after UNAVAILABLE".into(),
                c.retries(Failure::Unavailable).to_string(),
            ),
            (
                "  after RESOURCE_EXHAUSTED (pushback)".into(),
                c.retries(Failure::ResourceExhausted).to_string(),
            ),
            (
                "  after ABORTED / DEADLINE / other".into(),
                (c.retries(Failure::Aborted)
                    + c.retries(Failure::DeadlineExceeded)
                    + c.retries(Failure::Other))
                .to_string(),
            ),
            (
                "faults injected: drop before send".into(),
                p.dropped_before_send.load(Relaxed).to_string(),
            ),
            (
                "faults injected: drop after send".into(),
                p.dropped_after_send.load(Relaxed).to_string(),
            ),
            (
                "faults injected: slow answer".into(),
                p.slowed.load(Relaxed).to_string(),
            ),
            (
                "faults injected: UNAVAILABLE".into(),
                self.unavailable.to_string(),
            ),
            (
                "faults injected: RESOURCE_EXHAUSTED".into(),
                self.resource_exhausted.to_string(),
            ),
            (
                "faults injected: run lost after its stock call".into(),
                self.runs_lost.to_string(),
            ),
            ("server: executed".into(), e.executed.to_string()),
            ("server: replays".into(), e.replayed.to_string()),
            ("server: joins".into(), e.joined.to_string()),
            ("server: conflicts".into(), e.conflicts.to_string()),
        ];
        let mut rows = rows;
        if let Some(t) = &self.tier {
            rows.extend([
                (
                    "tier: claimed and ran / other instance's result".into(),
                    format!("{} / {}", t.executed, t.remote_replayed + t.remote_joined),
                ),
                (
                    "tier: fenced out / unrecorded / unavailable".into(),
                    format!("{} / {} / {}", t.fenced_out, t.unrecorded, t.unavailable),
                ),
            ]);
        }
        rows.extend::<Vec<(String, String)>>(vec![
            ("intents succeeded".into(), self.succeeded().to_string()),
            (
                "give-ups".into(),
                format!(
                    "{} (of which created once: {gave_up_created})",
                    self.gave_up()
                ),
            ),
            (
                "  by why: attempts / deadline / budget / not retryable".into(),
                format!(
                    "{} / {} / {} / {}",
                    c.retrier.give_ups(GiveUp::Attempts),
                    c.retrier.give_ups(GiveUp::Deadline),
                    c.retrier.give_ups(GiveUp::Budget),
                    c.retrier.give_ups(GiveUp::NotRetryable) + c.retrier.give_ups(GiveUp::Pushback)
                ),
            ),
            (
                "orders actually created".into(),
                self.orders_created().to_string(),
            ),
            (
                "stock deductions (stock service)".into(),
                self.deductions_total().to_string(),
            ),
            (
                "intents deducted twice".into(),
                self.deductions
                    .values()
                    .filter(|&&n| n > 1)
                    .count()
                    .to_string(),
            ),
            (
                "deductions / orders / successful intents".into(),
                self.chain_check(),
            ),
            (
                "intents created twice".into(),
                self.results
                    .iter()
                    .filter(|r| self.orders.get(&r.intent).is_some_and(|o| o.len() > 1))
                    .count()
                    .to_string(),
            ),
            (
                "successes not created exactly once".into(),
                self.results
                    .iter()
                    .filter(|r| {
                        r.outcome.is_ok_and(|id| {
                            self.orders.get(&r.intent).map(Vec::as_slice) != Some(&[id])
                        })
                    })
                    .count()
                    .to_string(),
            ),
            (
                "peak in-flight (scraped from /metrics)".into(),
                format!("{} ({} scrapes)", self.peak_in_flight, self.scrapes),
            ),
            (
                "wall time".into(),
                format!("{:.2} s", self.elapsed.as_secs_f64()),
            ),
        ]);
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let v = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        let line = format!("+{}+{}+\n", "-".repeat(w + 2), "-".repeat(v + 2));
        let mut out = line.clone();
        for (k, val) in rows {
            let _ = writeln!(out, "| {k:<w$} | {val:>v$} |");
        }
        out.push_str(&line);
        out
    }

    /// Deductions, orders and successful intents, and whether they are equal; with give-ups the
    /// equality is not a promise (a run lost after its deduction may never get its order).
    fn chain_check(&self) -> String {
        let (d, o, s) = (
            self.deductions_total(),
            self.orders_created(),
            self.succeeded(),
        );
        let verdict = match self.gave_up() {
            0 if d == o && o == s => "equal".to_owned(),
            0 => "NOT EQUAL".to_owned(),
            n => format!("not compared: {n} gave up"),
        };
        format!("{d} / {o} / {s} ({verdict})")
    }
}
