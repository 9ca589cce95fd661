package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/native"
)

// Param is a trainable tensor [Rows x Cols]. Dense parameters get a dense
// gradient in Grad; sparse ones (embedding tables) get merged row gradients
// in SparseGrad, and only those rows are updated.
type Param struct {
	Name       string
	Rows, Cols int
	Value      native.Buffer
	Grad       native.Buffer // dense parameters only
	Sparse     bool
	SparseGrad native.SparseRows
	State      []native.Buffer // optimiser state, each shaped like Value
}

// Len is the number of floats in the parameter.
func (p *Param) Len() int { return p.Rows * p.Cols }

func newDense(b native.Backend, name string, rows, cols int) *Param {
	return &Param{Name: name, Rows: rows, Cols: cols, Value: b.Alloc(rows * cols), Grad: b.Alloc(rows * cols)}
}

func newSparse(b native.Backend, name string, rows, cols int) *Param {
	return &Param{Name: name, Rows: rows, Cols: cols, Value: b.Alloc(rows * cols), Sparse: true}
}

// declared is a dense parameter with its shape and no values, held
// elsewhere (Value and Grad of 0 floats).
func declared(b native.Backend, name string, rows, cols int) *Param {
	return &Param{Name: name, Rows: rows, Cols: cols, Value: b.Alloc(0), Grad: b.Alloc(0)}
}

// initUniform fills p with values uniform in [-limit, limit) from a stream
// seeded by (seed, p.Name).
func initUniform(b native.Backend, p *Param, seed uint64, limit float64) error {
	rng := rand.New(rand.NewPCG(seed, initrow.NameHash(p.Name)))
	vals := make([]float32, p.Len())
	for i := range vals {
		vals[i] = float32((2*rng.Float64() - 1) * limit)
	}
	return b.Upload(p.Value, vals)
}

// InitRow fills one embedding row deterministically from (seed, table, row),
// so that a parameter server creating rows lazily on first pull produces
// exactly what single-process training starts from.
func InitRow(dst []float32, seed uint64, table string, row int64, limit float64) {
	initrow.Fill(dst, seed, table, row, limit)
}

// initRows fills a whole embedding table with InitRow.
func initRows(b native.Backend, p *Param, seed uint64, limit float64) error {
	vals := make([]float32, p.Len())
	for r := range p.Rows {
		InitRow(vals[r*p.Cols:(r+1)*p.Cols], seed, p.Name, int64(r), limit)
	}
	return b.Upload(p.Value, vals)
}

// glorotLimit is the Glorot/Xavier uniform bound for a fan-in x fan-out matrix.
func glorotLimit(fanIn, fanOut int) float64 {
	return math.Sqrt(6 / float64(fanIn+fanOut))
}

func checkRows(layer string, a Activation, rows int) error {
	if a.Rows != rows {
		return fmt.Errorf("%s: gradient has %d rows, forward had %d", layer, a.Rows, rows)
	}
	return nil
}
