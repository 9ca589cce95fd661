package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/native"
)

// LogUniform samples classes from the log-uniform (Zipfian) distribution
// over [0, N) that TensorFlow's log_uniform_candidate_sampler uses:
//
//	Q(c) = log((c+2)/(c+1)) / log(N+1)
//
// It suits classes numbered in order of decreasing frequency (word ids by
// frequency rank).
type LogUniform struct {
	n        int64
	logRange float64 // log(N+1)
}

// NewLogUniform returns the sampler over [0, n), n >= 1.
func NewLogUniform(n int64) LogUniform {
	return LogUniform{n: n, logRange: math.Log(float64(n) + 1)}
}

// Sample draws one class: floor(exp(u log(N+1))) - 1 for u uniform in
// [0, 1), which is c exactly when c+1 <= exp(u log(N+1)) < c+2.
func (s LogUniform) Sample(rng *rand.Rand) int64 {
	c := int64(math.Exp(rng.Float64()*s.logRange)) - 1
	return min(max(c, 0), s.n-1)
}

// Prob is Q(c).
func (s LogUniform) Prob(c int64) float64 {
	return math.Log1p(1/(float64(c)+1)) / s.logRange
}

// maskedLogit is the logit of an accidental hit, a sampled negative equal
// to the sample's own target: the NCE loss of a negative with this logit is
// exactly 0 in float32 (log1p(exp(-1e4)) and sigmoid(-1e4) underflow), and
// the layer also zeroes its gradient, so an accidental hit neither pushes the
// true class down as noise nor counts in the loss.
const maskedLogit = -1e4

// NCE is the output layer of noise-contrastive estimation over Classes
// classes. Its weights are ONE sparse table [classes x (in+1)], the last
// column the bias, so a step updates only the rows of the batch's targets
// and of the sampled negatives.
//
// Each step draws K negatives from the log-uniform sampler, shared by the
// whole batch (as TensorFlow's sampled losses do), with replacement. The
// output is [rows x (1+K)] logits: column 0 for the sample's target class t
// (Batch.Classes), column 1+k for negative n_k, each the log-odds that c
// came from the data rather than from the noise:
//
//	logit(c) = s(c) - log(K Q(c)),   s(c) = h·w_c + b_c
//
// The table stores the bias relative to the log noise probability,
// b_c = β_c + log Q(c), so the layer computes logit(c) = h·w_c + β_c - log K.
// This is the usual parametrisation with the bias started at log Q(c): the
// untrained model is the noise distribution itself (self-normalised), rare
// classes do not start with the large logits -log(K Q(c)) that only their
// rare draws as negatives could bring down (measured on the words data with
// the nce zoo model, 1000 steps: held-out loss 49.9 -> 38.1 with β started
// at 0, against 3.1 -> 0.82 this way), and the rows still start as InitRow
// makes them, so a parameter server can create them lazily. The model's
// score of class c for ranking the whole vocabulary is s(c) = h·w_c + β_c +
// log Q(c) (Score).
//
// The negatives of a step are a function of the model seed and of the
// batch's content (its targets and ids), not of a counter: a step draws the
// same negatives wherever and whenever it runs — resumed from a checkpoint,
// on a pipeline stage, or forward-only again on the same batch (as the
// gradient checks do) — and there is no sampler state to checkpoint. A
// batch seen again in a later epoch meets the same negatives again.
type NCE struct {
	shape     config.LayerShape
	classes   int64
	negatives int
	sampler   LogUniform
	seed      uint64
	Table     *Param
	// local, if set, lists ascending the classes whose rows Table holds
	// (a pipeline stage keeps only a batch's rows); nil: every class.
	local []int64

	in       Activation
	rowsBuf  native.Buffer // the gathered rows of the last forward
	ids      []int64       // targets (rows), then negatives (K): the gathered rows
	offsets  []int64       // 0, 1, ..., rows+K: one bag per gathered row
	masked   []bool        // [rows x K]: negative k equals the target of row i
	gathered scratch       // [(rows+K) x (in+1)] rows of Table
	logits   scratch       // [rows x (1+K)]
	dlogits  scratch       // dout with accidental hits zeroed
	grad     scratch       // [(rows+K) x (in+1)]: one gradient row per gathered row
	ones     scratch       // [rows] of 1, for the bias gradient's column sums
	dx       []scratch
}

// NewNCE builds an NCE layer whose table rows start as InitRow does for
// embedding tables, so that a parameter server can create them lazily.
func NewNCE(b native.Backend, shape config.LayerShape, classes, negatives int, seed uint64, scale float64) (*NCE, error) {
	l, err := newNCE(b, shape, classes, negatives, seed, classes)
	if err != nil {
		return nil, err
	}
	if err := initRows(b, l.Table, seed, scale); err != nil {
		return nil, err
	}
	return l, nil
}

// remoteNCE builds an NCE layer whose table holds no rows: the parameter
// servers hold them, and a pipeline stage gives it a batch's (SetLocalRows).
func remoteNCE(b native.Backend, shape config.LayerShape, classes, negatives int, seed uint64) (*NCE, error) {
	return newNCE(b, shape, classes, negatives, seed, 0)
}

func newNCE(b native.Backend, shape config.LayerShape, classes, negatives int, seed uint64, rows int) (*NCE, error) {
	if classes < 2 || negatives < 1 || shape.In < 1 || shape.Out != 1+negatives {
		return nil, fmt.Errorf("%s: %d classes, %d negatives, input %d, output %d: want classes >= 2, negatives >= 1 and output 1+negatives",
			shape.Name, classes, negatives, shape.In, shape.Out)
	}
	return &NCE{shape: shape, classes: int64(classes), negatives: negatives,
		sampler: NewLogUniform(int64(classes)), seed: seed,
		Table: newSparse(b, shape.Name+".table", rows, shape.In+1)}, nil
}

func (l *NCE) Shape() config.LayerShape { return l.shape }
func (l *NCE) Params() []*Param         { return []*Param{l.Table} }

// Negatives returns the negatives drawn for batch: K classes from the
// log-uniform sampler, seeded by the layer's seed and the batch's content.
func (l *NCE) Negatives(batch *data.Batch) []int64 {
	rng := rand.New(rand.NewPCG(l.seed^initrow.NameHash(l.Table.Name), batchDigest(batch)))
	neg := make([]int64, l.negatives)
	for k := range neg {
		neg[k] = l.sampler.Sample(rng)
	}
	return neg
}

// Rows returns the classes whose rows a step on batch reads and updates:
// its targets and its negatives, ascending and distinct. A pipeline stage
// pulls these rows and gives them to SetLocalRows.
func (l *NCE) Rows(batch *data.Batch) []int64 {
	rows := append(slices.Clone(batch.Classes), l.Negatives(batch)...)
	slices.Sort(rows)
	return slices.Compact(rows)
}

// SetLocalRows says Table holds only the rows of classes (ascending and
// distinct), row k being class classes[k]; nil means every class.
func (l *NCE) SetLocalRows(classes []int64) { l.local = classes }

// tableRows maps the classes in ids to rows of Table, in place.
func (l *NCE) tableRows(ids []int64) error {
	if l.local == nil {
		return nil
	}
	for i, c := range ids {
		k, ok := slices.BinarySearch(l.local, c)
		if !ok {
			return fmt.Errorf("%s: class %d is not among the %d rows held for this batch", l.shape.Name, c, len(l.local))
		}
		ids[i] = int64(k)
	}
	return nil
}

// batchDigest hashes a batch's targets and sparse ids (splitmix64 steps).
func batchDigest(b *data.Batch) uint64 {
	h := uint64(len(b.Classes))
	mix := func(v uint64) {
		h += v + 0x9e3779b97f4a7c15
		h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
		h = (h ^ h>>27) * 0x94d049bb133111eb
		h ^= h >> 31
	}
	for _, c := range b.Classes {
		mix(uint64(c))
	}
	for _, id := range b.IDs {
		mix(uint64(id))
	}
	for _, o := range b.Offsets {
		mix(uint64(o))
	}
	return h
}

// Forward computes the target's and the negatives' logits.
func (l *NCE) Forward(s *Step, in Activation) (Activation, error) {
	if err := l.checkInput(s.Batch, in); err != nil {
		return Activation{}, err
	}
	be, rows, k, w := s.Backend, in.Rows, l.negatives, l.shape.In+1
	l.in = in
	l.ids = append(append(l.ids[:0], s.Batch.Classes...), l.Negatives(s.source())...)
	if err := l.tableRows(l.ids); err != nil {
		return Activation{}, err
	}
	l.offsets = l.offsets[:0]
	for i := range len(l.ids) + 1 {
		l.offsets = append(l.offsets, int64(i))
	}
	g := l.gathered.get(be, len(l.ids)*w)
	if err := be.EmbeddingBag(native.PoolSum, l.Table.Value, l.Table.Rows, w, l.offsets, l.ids, g); err != nil {
		return Activation{}, fmt.Errorf("%s: gather: %w", l.shape.Name, err)
	}
	l.rowsBuf = g
	logits := l.logits.get(be, rows*(1+k))
	if err := l.negativeDots(be, in, g, logits); err != nil {
		return Activation{}, fmt.Errorf("%s: forward: %w", l.shape.Name, err)
	}
	if err := l.finishLogits(be, in, g, logits); err != nil {
		return Activation{}, fmt.Errorf("%s: forward: %w", l.shape.Name, err)
	}
	return Activation{Rows: rows, Parts: []Part{{Buf: logits, Width: 1 + k, NeedGrad: true}}}, nil
}

func (l *NCE) checkInput(bt *data.Batch, in Activation) error {
	if in.Width() != l.shape.In {
		return fmt.Errorf("%s: input width %d, want %d", l.shape.Name, in.Width(), l.shape.In)
	}
	if bt == nil || len(bt.Classes) != in.Rows || in.Rows == 0 {
		return fmt.Errorf("%s: needs one target class per sample (Batch.Classes) for %d samples", l.shape.Name, in.Rows)
	}
	for i, c := range bt.Classes {
		if c < 0 || c >= l.classes {
			return fmt.Errorf("%s: sample %d has class %d outside [0, %d): %w", l.shape.Name, i, c, l.classes, native.ErrRange)
		}
	}
	return nil
}

// negativeDots writes h_i·w_{n_k} into columns 1..K of logits: one GEMM per
// input part against its columns of the negatives' rows.
func (l *NCE) negativeDots(be native.Backend, in Activation, g, logits native.Buffer) error {
	rows, k, w := in.Rows, l.negatives, l.shape.In+1
	neg := g.Slice(rows*w, (rows+k)*w)
	cols := logits.Slice(1, rows*(1+k))
	col := 0
	for p, part := range in.Parts {
		beta := float32(1)
		if p == 0 {
			beta = 0
		}
		if err := be.Gemm(false, true, rows, k, part.Width, 1, part.Buf, part.Width, neg.Slice(col, k*w), w, beta, cols, 1+k); err != nil {
			return err
		}
		col += part.Width
	}
	return nil
}

// finishLogits adds the target's dot products and the stored biases β,
// subtracts log K (see NCE) and masks accidental hits.
func (l *NCE) finishLogits(be native.Backend, in Activation, g, logits native.Buffer) error {
	rows, k, w := in.Rows, l.negatives, l.shape.In+1
	out, err := hostFloats(be, logits)
	if err != nil {
		return err
	}
	gh, err := hostFloats(be, g)
	if err != nil {
		return err
	}
	targets, negs := l.ids[:rows], l.ids[rows:]
	dots, err := targetDots(be, in, gh, w)
	if err != nil {
		return err
	}
	l.masked = grow(l.masked, rows*k)
	logK := float32(math.Log(float64(k)))
	for i, t := range targets {
		row := out[i*(1+k) : (i+1)*(1+k)]
		row[0] = float32(dots[i]+float64(gh[i*w+w-1])) - logK
		for j, c := range negs {
			l.masked[i*k+j] = c == t
			if c == t {
				row[1+j] = maskedLogit
				continue
			}
			row[1+j] += gh[(rows+j)*w+w-1] - logK
		}
	}
	return putBack(be, logits, out)
}

// Score is the model's score s(c) = h·w_c + β_c + log Q(c) of class c for
// input h, an estimate of log p(c | h) under NCE's self-normalisation.
func (l *NCE) Score(be native.Backend, h []float32, c int64) (float64, error) {
	w := l.shape.In + 1
	if len(h) != w-1 || c < 0 || c >= l.classes {
		return 0, fmt.Errorf("%s: score of class %d for an input of %d values: %w", l.shape.Name, c, len(h), native.ErrArg)
	}
	table, err := hostFloats(be, l.Table.Value.Slice(int(c)*w, int(c+1)*w))
	if err != nil {
		return 0, err
	}
	return dot64(h, table[:w-1]) + float64(table[w-1]) + math.Log(l.sampler.Prob(c)), nil
}

// targetDots returns h_i·w_{t_i} for each row, w_{t_i} being row i of the
// gathered table rows gh (row stride w).
func targetDots(be native.Backend, in Activation, gh []float32, w int) ([]float64, error) {
	dots := make([]float64, in.Rows)
	col := 0
	for _, part := range in.Parts {
		h, err := hostFloats(be, part.Buf)
		if err != nil {
			return nil, err
		}
		for i := range dots {
			dots[i] += dot64(h[i*part.Width:(i+1)*part.Width], gh[i*w+col:i*w+col+part.Width])
		}
		col += part.Width
	}
	return dots, nil
}

// Backward writes the table's sparse gradient (the targets' and the
// negatives' rows, merged where a class appears several times) and the
// input's gradient. Accidental hits get no gradient.
func (l *NCE) Backward(s *Step, dout Activation) (Activation, error) {
	be, rows, k, w := s.Backend, l.in.Rows, l.negatives, l.shape.In+1
	if err := checkRows(l.shape.Name, dout, rows); err != nil {
		return Activation{}, err
	}
	dbuf, err := dout.Single(l.shape.Name)
	if err != nil {
		return Activation{}, err
	}
	if dout.Width() != 1+k {
		return Activation{}, fmt.Errorf("%s: backward got %d columns, want %d", l.shape.Name, dout.Width(), 1+k)
	}
	dl, err := l.maskedGrad(be, dbuf)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: backward: %w", l.shape.Name, err)
	}
	grad, err := l.tableGrad(be, dl)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: table gradient: %w", l.shape.Name, err)
	}
	din, err := l.inputGrad(be, dl)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: input gradient: %w", l.shape.Name, err)
	}
	sg, err := be.EmbeddingBagBackward(native.PoolSum, w, l.offsets, l.ids, grad)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: table gradient: %w", l.shape.Name, err)
	}
	l.Table.SparseGrad = sg
	return din, nil
}

// maskedGrad copies dout with the accidental hits' entries set to 0.
func (l *NCE) maskedGrad(be native.Backend, dbuf native.Buffer) (native.Buffer, error) {
	rows, k := l.in.Rows, l.negatives
	dl := l.dlogits.get(be, rows*(1+k))
	if err := be.Copy(dl, dbuf); err != nil {
		return nil, err
	}
	h, err := hostFloats(be, dl)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		for j := range k {
			if l.masked[i*k+j] {
				h[i*(1+k)+1+j] = 0
			}
		}
	}
	return dl, putBack(be, dl, h)
}

// tableGrad returns the gradient of the gathered rows, one row each: g_i0 [h_i, 1] for
// target i, and sum_i g_i,1+k [h_i, 1] for negative k (GEMMs over the input
// parts, and one against a vector of ones for the bias column).
func (l *NCE) tableGrad(be native.Backend, dl native.Buffer) (native.Buffer, error) {
	rows, k, w := l.in.Rows, l.negatives, l.shape.In+1
	grad := l.grad.get(be, (rows+k)*w)
	if err := l.targetRowsGrad(be, dl, grad); err != nil {
		return nil, err
	}
	negCols := dl.Slice(1, rows*(1+k))
	neg := grad.Slice(rows*w, (rows+k)*w)
	col := 0
	for _, part := range l.in.Parts {
		if err := be.Gemm(true, false, k, part.Width, rows, 1, negCols, 1+k, part.Buf, part.Width, 0, neg.Slice(col, k*w), w); err != nil {
			return nil, err
		}
		col += part.Width
	}
	ones := l.ones.get(be, rows)
	if err := be.Fill(ones, 1); err != nil {
		return nil, err
	}
	return grad, be.Gemm(true, false, k, 1, rows, 1, negCols, 1+k, ones, 1, 0, neg.Slice(w-1, k*w), w)
}

// targetRowsGrad writes g_i0 [h_i, 1] into the first rows rows of grad.
func (l *NCE) targetRowsGrad(be native.Backend, dl, grad native.Buffer) error {
	rows, k, w := l.in.Rows, l.negatives, l.shape.In+1
	gh, err := hostFloats(be, grad)
	if err != nil {
		return err
	}
	dh, err := hostFloats(be, dl)
	if err != nil {
		return err
	}
	col := 0
	for _, part := range l.in.Parts {
		h, err := hostFloats(be, part.Buf)
		if err != nil {
			return err
		}
		for i := range rows {
			gi := dh[i*(1+k)]
			dst, src := gh[i*w+col:i*w+col+part.Width], h[i*part.Width:(i+1)*part.Width]
			for c, v := range src {
				dst[c] = gi * v
			}
		}
		col += part.Width
	}
	for i := range rows {
		gh[i*w+w-1] = dh[i*(1+k)]
	}
	return putBack(be, grad, gh)
}

// inputGrad computes dh_p = G_neg W_neg,p + g_i0 w_{t_i},p for the parts
// that need a gradient.
func (l *NCE) inputGrad(be native.Backend, dl native.Buffer) (Activation, error) {
	rows, k, w := l.in.Rows, l.negatives, l.shape.In+1
	if len(l.dx) < len(l.in.Parts) {
		l.dx = make([]scratch, len(l.in.Parts))
	}
	g := l.rowsBuf
	gh, err := hostFloats(be, g)
	if err != nil {
		return Activation{}, err
	}
	dh, err := hostFloats(be, dl)
	if err != nil {
		return Activation{}, err
	}
	negCols, neg := dl.Slice(1, rows*(1+k)), g.Slice(rows*w, (rows+k)*w)
	din := Activation{Rows: rows}
	col := 0
	for p, part := range l.in.Parts {
		out := Part{Width: part.Width, NeedGrad: part.NeedGrad}
		if part.NeedGrad {
			out.Buf = l.dx[p].get(be, rows*part.Width)
			if err := be.Gemm(false, false, rows, part.Width, k, 1, negCols, 1+k, neg.Slice(col, k*w), w, 0, out.Buf, part.Width); err != nil {
				return Activation{}, err
			}
			dx, err := hostFloats(be, out.Buf)
			if err != nil {
				return Activation{}, err
			}
			for i := range rows {
				gi, wt := dh[i*(1+k)], gh[i*w+col:i*w+col+part.Width]
				row := dx[i*part.Width : (i+1)*part.Width]
				for c, v := range wt {
					row[c] += gi * v
				}
			}
			if err := putBack(be, out.Buf, dx); err != nil {
				return Activation{}, err
			}
		}
		col += part.Width
		din.Parts = append(din.Parts, out)
	}
	return din, nil
}
