//! The deterministic random generator behind every benchmark's data (xorshift64): the same
//! seed gives the same corpus on every machine, so runs compare.

pub struct Xorshift(u64);

impl Xorshift {
    pub fn new(seed: u64) -> Self {
        Xorshift(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` distinct invented words of three syllables (the same list for the same `n`).
    pub fn invented_words(n: usize) -> Vec<String> {
        const SYLLABLES: [&str; 28] = [
            "ka", "lo", "mi", "ren", "to", "sha", "vel", "dor", "pi", "qua", "zen", "ul", "bri", "fen", "gar", "hol",
            "nim", "sor", "tep", "wyn", "jas", "cor", "lin", "bex", "mur", "oth", "pra", "sil",
        ];
        SYLLABLES
            .iter()
            .flat_map(|a| SYLLABLES.iter().flat_map(move |b| SYLLABLES.iter().map(move |c| format!("{a}{b}{c}"))))
            .take(n)
            .collect()
    }

    /// A random direction in `dim` dimensions, unit length.
    pub fn unit_vector(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| self.uniform() as f32 - 0.5).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
}
