//! The fleet benchmark: per-event and per-pass costs at 1,000 and 10,000 cached deployments
//! (8 pods each), and the heap the caches take (`make bench-unit`; `src/bench.rs` says what is
//! measured). Prints one table; the ratio column is the cost at the larger fleet over the cost
//! at the smaller, which stays near 1 where the cost does not grow with the fleet.
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let sizes: Vec<usize> = std::env::var("FLEET_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| v.len() == 2)
        .unwrap_or_else(|| vec![1_000, 10_000]);
    let ops = 20_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Each size three times; the median of each operation's figures is printed.
    let runs: Vec<Vec<deepinfer_operator::bench::Figures>> = sizes
        .iter()
        .map(|n| {
            (0..3)
                .map(|_| runtime.block_on(deepinfer_operator::bench::fleet(*n, ops)))
                .collect()
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (small, large) = (&runs[0], &runs[1]);
    println!(
        "fleet benchmark: {} and {} deployments ({} and {} cached pods), {ops} operations each, median of 3",
        sizes[0], sizes[1], small[0].pods, large[0].pods
    );
    println!(
        "| operation | ns at {} | ns at {} | ratio |",
        sizes[0], sizes[1]
    );
    println!("| --- | ---: | ---: | ---: |");
    for (k, (name, _)) in small[0].per_op.iter().enumerate() {
        let at = |figures: &[deepinfer_operator::bench::Figures]| {
            median(figures.iter().map(|f| f.per_op[k].1).collect())
        };
        let (a, b) = (at(small), at(large));
        println!("| {name} | {a:.0} | {b:.0} | {:.2} |", b / a);
    }
    let scrape = |figures: &[deepinfer_operator::bench::Figures]| {
        median(figures.iter().map(|f| f.scrape_ms).collect())
    };
    println!(
        "| a /metrics scrape (every deployment's series; ms) | {:.1} | {:.1} | {:.2} |",
        scrape(small),
        scrape(large),
        scrape(large) / scrape(small)
    );
    for (n, figures) in sizes.iter().zip([small, large]) {
        match figures[0].heap_bytes {
            Some(bytes) => println!(
                "heap of the filled caches, indexes and figures at {n} deployments: {:.1} MiB ({:.0} bytes per deployment)",
                bytes as f64 / 1048576.0,
                bytes as f64 / *n as f64
            ),
            None => println!("heap at {n} deployments: the allocator's statistics cannot be read"),
        }
    }
}
