// Package batching is the per-replica batch controller of heterogeneity-aware
// data-parallel training, after Dynamic Batching ("Taming Resource
// Heterogeneity In Distributed ML Training With Dynamic Batching", Tyagi and
// Sharma). Under BSP every step waits for the slowest replica; giving replica
// k a batch b_k proportional to its throughput X_k (samples/s), with the
// global batch B = Σb_k constant and gradients averaged with weights
// λ_k = b_k/B, makes the replicas finish together.
//
// Everything here is a pure function of batches and step times: it does no
// I/O, starts no goroutine and imports nothing of heterps.
//
// # Split
//
// Split(B, w, min, max) returns integers proportional to w that sum to B, each
// in [min_k, max_k]. The real shares are
//
//	x_k = clamp(λ·w_k, min_k, max_k),  λ such that Σ_k x_k = B
//
// (water-filling: what clipping frees or takes is spread over the other
// replicas in proportion to their weights), rounded by largest remainder with
// ties to the lower index.
//
// # Variable (open loop)
//
// Variable sets b_k = Split(B, X_k) once before the first step, with X_k the
// per-replica throughput from the plan or a profile.
//
// # Dynamic (closed loop)
//
// A Controller gets each replica's compute time per step and keeps an EMA of
// it over a window of steps run at one split:
//
//	t_k ← s·t_k + (1-s)·sample   (s = Config.Smoothing)
//
// Every Interval steps, with t̄ = mean_k t_k, it sets
//
//	b_k ← b_k · t̄ / t_k          (b ∝ X_k = b_k/t_k; Δb_k = -τ_k·X_k, τ_k = t_k - t̄)
//
// and re-splits B within the bounds, unless max_k |t_k - t̄|/t̄ < Deadband. With
// t_k = c_k·b_k one update reaches the balance b_k ∝ 1/c_k; a per-step overhead
// o_k makes the update a contraction that approaches the balance (equal t_k)
// monotonically, without overshoot. Zero, negative and NaN times are ignored
// and named in the Decision; a change of the replica set, or a step that goes
// back, resets the history.
//
// No decision rests on times measured before the previous change. A replica
// whose reported batch changes forgets its times (the others keep theirs)
// and the window's count of steps starts again. After an adjustment the
// replicas go on reporting the old split for a while (reports lag; in ASP
// each replica switches at its own next step): the controller waits until
// every replica reports the split it chose (or, after 4 intervals, gives up
// waiting: a split set elsewhere), and never decides on a split whose sum is
// not the run's global batch (one in transition).
//
// # Simulation
//
// Simulate runs a Controller against a model of step times (LinearTimes:
// t_k = c_k·b_k + o_k) behind a BSP barrier and reports each replica's wait
// per step; the tests and bench/batching use it.
package batching
