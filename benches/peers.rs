//! Placeholder: the benchmark lands with the benchmarks issue.
fn main() {
    println!("benchmark not written yet");
}
