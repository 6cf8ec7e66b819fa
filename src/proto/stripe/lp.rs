//! The packing LP, solved exactly by column generation: maximize the total rate of a set of
//! arborescences subject to every arc's capacity, adding the arborescence that the dual
//! prices make cheapest (a minimum-cost arborescence, by Chu-Liu/Edmonds) while one costs
//! less than 1. An optimal basis has at most one tree per arc, so few trees come out.
//!
//! A dense simplex tableau over the arcs (one row each, slack columns holding the basis
//! inverse), with columns appended as they are generated. Capacities are normalized to at
//! most 1, pivots are counted, and every step tolerates degenerate input.

use super::algo::chu_liu;

/// Pivot and reduced-cost tolerance on normalized values.
const TOL: f64 = 1e-11;

/// Column generation over the arcs `(u, v)` of `caps` (all positive). Starts from the given
/// trees; with `generate` false it only re-optimizes their rates. Returns the trees (parent
/// vectors) and their rates in the units of `caps`.
pub(super) fn solve(
    caps: &[Vec<f64>],
    arcs: &[(usize, usize)],
    root: usize,
    start: &[Vec<Option<usize>>],
    generate: bool,
    target: f64,
) -> Vec<(Vec<Option<usize>>, f64)> {
    let n = caps.len();
    let m = arcs.len();
    let scale = arcs.iter().map(|&(u, v)| caps[u][v]).fold(0.0f64, f64::max);
    if m == 0 || scale.is_nan() || scale <= 0.0 || !scale.is_finite() {
        return Vec::new();
    }
    let mut row_of = vec![vec![usize::MAX; n]; n];
    for (r, &(u, v)) in arcs.iter().enumerate() {
        row_of[u][v] = r;
    }
    let mut t = Tableau::new(arcs.iter().map(|&(u, v)| caps[u][v] / scale).collect());
    let mut trees: Vec<Vec<Option<usize>>> = Vec::new();
    let rows_of = |parent: &[Option<usize>]| -> Option<Vec<usize>> {
        let rows: Vec<usize> = parent
            .iter()
            .enumerate()
            .filter_map(|(c, p)| p.map(|p| row_of.get(p).and_then(|r| r.get(c)).copied()))
            .collect::<Option<Vec<usize>>>()?;
        rows.iter().all(|&r| r < m).then_some(rows)
    };
    for parent in start {
        if let Some(rows) = rows_of(parent) {
            t.add_column(&rows);
            trees.push(parent.clone());
        }
    }
    t.optimize(50 * m + 100);
    // Each round adds a column; the cap only bounds the work on pathological input.
    // Stops early once the total is within the caller's target (the known optimum, less a
    // little): column generation has a long tail of tiny improvements.
    for _ in 0..if generate { 20 * m + 20 } else { 0 } {
        if t.obj * scale >= target {
            break;
        }
        let list: Vec<(usize, usize, f64)> = arcs
            .iter()
            .enumerate()
            .map(|(r, &(u, v))| (u, v, t.z[r].max(0.0)))
            .collect();
        let Some(chosen) = chu_liu(n, &list, root) else {
            break;
        };
        let rows: Vec<usize> = (0..n).filter(|&v| v != root).map(|v| chosen[v]).collect();
        if rows.iter().map(|&r| t.z[r]).sum::<f64>() >= 1.0 - 1e-9 {
            break;
        }
        let mut parent = vec![None; n];
        for &r in &rows {
            parent[arcs[r].1] = Some(arcs[r].0);
        }
        t.add_column(&rows);
        trees.push(parent);
        t.optimize(50 * m + 100);
    }
    let mut rates = vec![0.0; trees.len()];
    for (r, &b) in t.basis.iter().enumerate() {
        if b >= m {
            rates[b - m] = t.rhs[r].max(0.0) * scale;
        }
    }
    trees
        .into_iter()
        .zip(rates)
        .filter(|(_, x)| *x > 0.0)
        .collect()
}

/// max 1·x subject to A x + s = b, x, s >= 0, in tableau form.
struct Tableau {
    /// Row r, column j (slacks first, then tree columns).
    a: Vec<Vec<f64>>,
    /// Right-hand side (values of the basic variables).
    rhs: Vec<f64>,
    /// Reduced costs; on slack columns, the dual prices.
    z: Vec<f64>,
    /// The basic column of every row.
    basis: Vec<usize>,
    /// Current objective value (normalized).
    obj: f64,
}

impl Tableau {
    fn new(b: Vec<f64>) -> Tableau {
        let m = b.len();
        let a = (0..m)
            .map(|r| (0..m).map(|j| if j == r { 1.0 } else { 0.0 }).collect())
            .collect();
        Tableau {
            a,
            rhs: b,
            z: vec![0.0; m],
            basis: (0..m).collect(),
            obj: 0.0,
        }
    }

    /// Appends a tree column using the arcs `rows`: its tableau entries are the sums of the
    /// basis inverse's columns (the slack columns), its reduced cost y·a - 1.
    fn add_column(&mut self, rows: &[usize]) {
        for row in &mut self.a {
            let v: f64 = rows.iter().map(|&e| row[e]).sum();
            row.push(v);
        }
        let y: f64 = rows.iter().map(|&e| self.z[e]).sum();
        self.z.push(y - 1.0);
    }

    /// Primal simplex: most negative reduced cost enters (lowest index on ties), ratio test
    /// with lowest basic index on ties; at most `budget` pivots.
    fn optimize(&mut self, budget: usize) {
        for _ in 0..budget {
            let Some(j) = (0..self.z.len())
                .filter(|&j| self.z[j] < -TOL)
                .min_by(|&x, &y| self.z[x].total_cmp(&self.z[y]).then(x.cmp(&y)))
            else {
                return;
            };
            let Some(r) = (0..self.a.len())
                .filter(|&r| self.a[r][j] > TOL)
                .min_by(|&x, &y| {
                    let (rx, ry) = (self.rhs[x] / self.a[x][j], self.rhs[y] / self.a[y][j]);
                    rx.total_cmp(&ry).then(self.basis[x].cmp(&self.basis[y]))
                })
            else {
                // Unbounded cannot happen with positive capacities; stop rather than loop.
                return;
            };
            self.pivot(r, j);
        }
    }

    fn pivot(&mut self, r: usize, j: usize) {
        let p = self.a[r][j];
        for v in self.a[r].iter_mut() {
            *v /= p;
        }
        self.rhs[r] /= p;
        let pivot_row = self.a[r].clone();
        let pivot_rhs = self.rhs[r];
        for (i, row) in self.a.iter_mut().enumerate() {
            let f = row[j];
            if i != r && f != 0.0 {
                for (v, &pv) in row.iter_mut().zip(&pivot_row) {
                    *v -= f * pv;
                }
                self.rhs[i] = (self.rhs[i] - f * pivot_rhs).max(0.0);
            }
        }
        let f = self.z[j];
        self.obj -= f * pivot_rhs;
        for (v, &pv) in self.z.iter_mut().zip(&pivot_row) {
            *v -= f * pv;
        }
        self.basis[r] = j;
    }
}
