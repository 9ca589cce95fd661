// Package alloc divides a shared cluster's units (CPU cores, GPUs) among many
// training jobs each scheduling epoch. It follows SLAQ ("Quality-Driven
// Scheduling for Distributed Machine Learning", Zhang, Stafman, Or and
// Freedman, SoCC 2017): the next unit goes to the job whose loss is predicted
// to fall most from it. Everything here is a pure function of its arguments;
// the package imports nothing of heterps.
//
// Normalised loss reduction. A job's quality after iteration k is
//
//	q(k) = (L_0 - L_k) / (L_0 - L_min)
//
// with L_0 its first loss and L_min the asymptote of its fitted curve, so jobs
// with different models and loss scales compare in one unit.
//
// Loss prediction. A job's (iteration, loss) history is fitted by weighted
// least squares, the weight of the i-th of n points being Decay^(n-1-i) so
// that old points fade and the fit follows a change of regime. Two families:
//
//	sublinear    L(k) = 1/(a k² + b k + c) + d   (SGD-like convergence)
//	exponential  L(k) = a e^{-b k} + c            (linear convergence)
//
// Each is fitted by a grid over its nonlinear parameter (d, resp. b) with the
// others solved by linear least squares (for the sublinear family on
// 1/(L-d), weighted by (L-d)^4 so that residuals keep the loss's scale), then
// polished by Levenberg-Marquardt on all parameters. The family with the
// smaller residual on the held-out last points wins and is refitted on all.
//
// Step time. An iteration processes S samples at c seconds each, spread over
// u units, plus a per-job overhead: t(u) = c·S/u + o. StepModel holds C = c·S
// and O, fitted by least squares from measured (units, seconds) pairs.
//
// Allocation. Every active job first gets one unit (if there are fewer units
// than jobs, the jobs earliest in the given order get one each). The rest go
// one at a time from a max-heap (container/heap) keyed per policy, and the
// popped job's key is recomputed after every grant, until every unit is given
// or every job is at its MaxUnits. With q_j(u) the predicted quality at the
// end of the next epoch when job j runs on u units and g_j(u) = q_j(u+1) -
// q_j(u) the gain of one more unit, the keys are:
//
//	quality           g_j(u)              (SLAQ: maximise the sum of qualities)
//	maxmin            -q_j(u)             (raise the lowest quality first)
//	priority          w_j·g_j(u)          (maximise the weighted sum)
//	quality-per-cost  g_j(u)/price_j      (quality gained per unit price)
//	fair              -u                  (even split, ±1)
//
// Ties break toward the job holding more units now (fewer moves), then the
// smaller ID, so a decision is deterministic. Because q_j is concave in u
// (iterations per epoch E·u/(C+O·u) are concave in u, and a convex decreasing
// loss of them gives a concave quality), the greedy result maximises the sum
// objectives exactly and the max-min one in its minimum.
package alloc
