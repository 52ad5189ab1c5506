// The allocation loop of bench/tracking_cost.sh: each thread allocates a 24-byte box and a
// short Vec per iteration, keeping the last 1,000 boxes.
fn work(n: usize) -> usize {
    let mut keep: Vec<Box<[u8; 24]>> = Vec::with_capacity(1000);
    let mut s = 0usize;
    for i in 0..n {
        let b = Box::new([i as u8; 24]);
        s += b[3] as usize;
        if keep.len() < 1000 { keep.push(b); } else { keep[i % 1000] = b; }
        let v: Vec<u64> = (0..(i % 16) as u64).collect();
        s += v.len();
    }
    s
}
fn main() {
    let threads: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let hs: Vec<_> = (0..threads).map(|_| std::thread::spawn(|| work(3_000_000))).collect();
    let s: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    println!("{s}");
}
