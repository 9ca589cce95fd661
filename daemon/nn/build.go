package nn

import (
	"errors"
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
)

// DefaultMaxTableBytes bounds the values of a model's sparse tables built
// whole (single-process training) when BuildOptions.MaxTableBytes is 0.
const DefaultMaxTableBytes = 64 << 30

// ErrTooLarge refuses a model whose whole tables do not fit one process.
var ErrTooLarge = errors.New("too large for single-process training")

// BuildOptions says what BuildWith allocates. The zero value builds
// everything, for single-process training.
type BuildOptions struct {
	// RemoteTables leaves embedding and NCE tables without rows: the
	// parameter servers hold them, and a pipeline stage fills in the rows
	// of the batch at hand. Declaring the parameters for the servers needs
	// only the tables' names and widths.
	RemoteTables bool
	// DenseLayers, if not nil, are the only layers whose dense parameters
	// get values (and gradients); the others' have their shapes and 0
	// floats, for a pipeline stage that does not run them.
	DenseLayers *LayerRange
	// MaxTableBytes bounds the bytes of whole tables' values; 0 means
	// DefaultMaxTableBytes. Ignored with RemoteTables.
	MaxTableBytes int64
}

// LayerRange is the layers [First, Last], 0-based.
type LayerRange struct{ First, Last int }

func (o BuildOptions) holdsDense(layer int) bool {
	return o.DenseLayers == nil || (layer >= o.DenseLayers.First && layer <= o.DenseLayers.Last)
}

// checkTables refuses whole tables larger than the limit before any is
// allocated.
func (o BuildOptions) checkTables(cfg *config.Model, shapes []config.LayerShape) error {
	if o.RemoteTables {
		return nil
	}
	limit := o.MaxTableBytes
	if limit <= 0 {
		limit = DefaultMaxTableBytes
	}
	need := TableBytes(shapes)
	if need > limit {
		return fmt.Errorf("model %s: its embedding and NCE tables need %d bytes (%s) of values in one process, more than the limit of %d (%s): %w; "+
			"the parameter servers of distributed training create rows only as batches use them",
			cfg.Name, need, HumanBytes(need), limit, HumanBytes(limit), ErrTooLarge)
	}
	return nil
}

// TableBytes is the bytes of the values of every sparse table of shapes
// held whole, 4 per float, saturating at math.MaxInt64.
func TableBytes(shapes []config.LayerShape) int64 {
	var sum int64
	for _, s := range shapes {
		if s.Kind == "embedding" || s.Kind == "nce" {
			sum = addSat(sum, mulSat(s.Weights, floatBytes))
		}
	}
	return sum
}

const floatBytes = 4

// mulSat is a*b for a, b >= 0, saturating at math.MaxInt64.
func mulSat(a, b int64) int64 {
	if a < 0 || b < 0 {
		return math.MaxInt64
	}
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// addSat is a+b for a, b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// HumanBytes writes n in binary units, e.g. "36.0 TiB".
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}
