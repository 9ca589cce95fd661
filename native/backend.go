package native

import (
	"errors"
	"fmt"
)

// Act is an activation function fused after a bias add.
type Act int

// Activations, numbered as in heterps_kernels.h.
const (
	Identity Act = iota
	ReLU
	Sigmoid
	Tanh
)

var actNames = [...]string{"identity", "relu", "sigmoid", "tanh"}

func (a Act) String() string {
	if a < 0 || int(a) >= len(actNames) {
		return fmt.Sprintf("Act(%d)", int(a))
	}
	return actNames[a]
}

// ParseAct maps a config name ("relu", ...) to an Act.
func ParseAct(name string) (Act, error) {
	for i, n := range actNames {
		if n == name {
			return Act(i), nil
		}
	}
	return 0, fmt.Errorf("unknown activation %q (want one of identity, relu, sigmoid, tanh)", name)
}

// Pool is how an embedding bag combines its rows.
type Pool int

// Pooling modes, numbered as in heterps_kernels.h.
const (
	PoolSum Pool = iota
	PoolMean
)

// OptKind names an optimiser.
type OptKind int

// Optimisers.
const (
	SGD OptKind = iota
	Adagrad
	Adam
)

// Optim holds an optimiser's hyper-parameters. Step is the 1-based step
// number used by Adam's bias correction.
type Optim struct {
	Kind        OptKind
	LR          float32
	Momentum    float32 // SGD; 0 means plain SGD without a velocity buffer
	Beta1       float32 // Adam
	Beta2       float32 // Adam
	Eps         float32 // Adagrad, Adam
	WeightDecay float32
	Step        int64
}

// StateBuffers is how many state buffers, each shaped like the parameters,
// the optimiser needs: velocity (SGD with momentum), accumulator (Adagrad),
// first and second moments (Adam).
func (o Optim) StateBuffers() int {
	switch o.Kind {
	case SGD:
		if o.Momentum != 0 {
			return 1
		}
		return 0
	case Adagrad:
		return 1
	case Adam:
		return 2
	}
	return 0
}

// Buffer is float32 memory owned by a Backend (host memory for the CPU
// backend, device memory for CUDA). Slice returns a view of [from, to) that
// shares the memory.
type Buffer interface {
	Len() int
	Slice(from, to int) Buffer
}

// SparseRows is a sparse gradient of an embedding table: one row of Dim
// floats in Rows for each distinct id in IDs, in order of first occurrence.
type SparseRows struct {
	IDs  []int64
	Dim  int
	Rows Buffer // len(IDs) x Dim
}

// Backend runs heterps' kernels on one kind of device. All tensors are
// float32, row-major; dimensions are given explicitly. Methods validate their
// arguments and return an error (wrapping ErrShape, ErrRange or ErrArg)
// instead of touching memory out of bounds. A Backend is safe for concurrent
// use by several goroutines on disjoint output buffers.
type Backend interface {
	// Name is "cpu/avx512", "cpu/avx2", "cpu/scalar" or "cuda/<device>".
	Name() string

	Alloc(n int) Buffer // zeroed
	Upload(dst Buffer, src []float32) error
	Download(dst []float32, src Buffer) error
	Copy(dst, src Buffer) error
	Fill(dst Buffer, v float32) error

	// Gemm computes C[m x n] = alpha*op(A)*op(B) + beta*C with row strides
	// lda, ldb, ldc.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a Buffer, lda int,
		b Buffer, ldb int, beta float32, c Buffer, ldc int) error

	// BiasAct computes y = act(x + bias) over a [rows x cols] tensor; bias
	// ([cols]) may be nil. y may be x.
	BiasAct(act Act, rows, cols int, x, bias, y Buffer) error
	// BiasActBackward computes dx = dy * act'(y) and, when dbias is not nil,
	// dbias = column sums of dx. dx may be dy.
	BiasActBackward(act Act, rows, cols int, y, dy, dx, dbias Buffer) error

	// EmbeddingBag pools rows of table [rows x dim] over bags given in CSR
	// form (len(offsets) = bags+1) into out [bags x dim].
	EmbeddingBag(pool Pool, table Buffer, rows, dim int, offsets, ids []int64, out Buffer) error
	// EmbeddingBagBackward turns dout [bags x dim] into the sparse gradient of
	// the table, one merged row per distinct id.
	EmbeddingBagBackward(pool Pool, dim int, offsets, ids []int64, dout Buffer) (SparseRows, error)

	// WeightedSum computes out = sum_k w[k]*g[k] in one pass over memory.
	WeightedSum(out Buffer, w []float32, g []Buffer) error

	// Update applies one optimiser step to dense parameters w with gradient g;
	// state holds o.StateBuffers() buffers shaped like w.
	Update(o Optim, w, g Buffer, state ...Buffer) error
	// UpdateRows applies one step to the listed (distinct) rows of a
	// [tableRows x dim] table; g is [len(rows) x dim]; state tables are shaped
	// like the table.
	UpdateRows(o Optim, table Buffer, tableRows, dim int, rows []int64, g Buffer, state ...Buffer) error

	// LSTMForward is the pointwise part of an LSTM cell: z [batch x 4h] are
	// the gate pre-activations (one GEMM on [x, h]), bias [4h] may be nil.
	// It writes gates [batch x 4h] (activated i, f, g, o), c and h [batch x h].
	LSTMForward(batch, hidden int, z, bias, cPrev, gates, c, h Buffer) error
	// LSTMBackward writes dz [batch x 4h] and dcPrev [batch x h] from dh and
	// dc (dc may be nil: no gradient from the next step).
	LSTMBackward(batch, hidden int, gates, cPrev, c, dh, dc, dz, dcPrev Buffer) error

	// Softmax writes the row softmax (log-softmax when log) of x into y; y may be x.
	Softmax(rows, cols int, x, y Buffer, log bool) error
	// BCEWithLogits returns the summed binary cross-entropy of logits against
	// labels in [0, 1].
	BCEWithLogits(n int, logits, labels Buffer) (float64, error)
	// BCEWithLogitsBackward writes dx = scale*(sigmoid(logits) - labels).
	BCEWithLogitsBackward(n int, logits, labels Buffer, scale float32, dx Buffer) error
	// SoftmaxCrossEntropy returns the summed cross-entropy of row logits
	// against class labels and, when dx is not nil, writes
	// dx = scale*(softmax - onehot).
	SoftmaxCrossEntropy(rows, cols int, logits Buffer, labels []int64, scale float32, dx Buffer) (float64, error)
}

// Sync waits until the work b has queued so far is done, for a backend
// whose operations return before their work has run (CUDA's stream); on
// one that runs them in the call (the CPU) it returns at once. Timings of
// device work need it around the timed work.
func Sync(b Backend) error {
	if q, ok := b.(interface{ Sync() error }); ok {
		return q.Sync()
	}
	return nil
}

// Errors that Backend methods wrap.
var (
	ErrShape = errors.New("shape mismatch")
	ErrRange = errors.New("index out of range")
	ErrArg   = errors.New("invalid argument")
)
