package initrow_test

import (
	"hash/fnv"
	"math"
	"testing"

	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/daemon/nn"
)

// TestFillMatchesNN pins Fill to the single-process trainer's InitRow bit for
// bit: a parameter server's lazily created rows must be what nn starts from.
func TestFillMatchesNN(t *testing.T) {
	for _, tc := range []struct {
		table string
		seed  uint64
		dim   int
		limit float64
	}{
		{"emb0.table", 1, 16, 0.01},
		{"user.table", 0xdeadbeef, 7, 0.5},
		{"", 42, 1, 1},
		{"item.table", math.MaxUint64, 33, 1e-3},
	} {
		for _, row := range []int64{0, 1, 2, 1000, -5, math.MaxInt64, math.MinInt64} {
			got := make([]float32, tc.dim)
			want := make([]float32, tc.dim)
			initrow.Fill(got, tc.seed, tc.table, row, tc.limit)
			nn.InitRow(want, tc.seed, tc.table, row, tc.limit)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s seed %d row %d [%d]: initrow %v, nn %v", tc.table, tc.seed, row, i, got[i], want[i])
				}
			}
		}
	}
}

func TestFillRangeAndDeterminism(t *testing.T) {
	const dim, limit = 64, 0.25
	a := make([]float32, dim)
	b := make([]float32, dim)
	initrow.Fill(a, 7, "t", 3, limit)
	initrow.Fill(b, 7, "t", 3, limit)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("[%d]: %v then %v for the same row", i, a[i], b[i])
		}
		if a[i] < -limit || a[i] >= limit {
			t.Fatalf("[%d] = %v outside [-%v, %v)", i, a[i], limit, limit)
		}
	}
	for _, other := range []struct {
		seed  uint64
		table string
		row   int64
	}{{8, "t", 3}, {7, "u", 3}, {7, "t", 4}} {
		initrow.Fill(b, other.seed, other.table, other.row, limit)
		if equal(a, b) {
			t.Errorf("seed %d table %q row %d gives the same values as seed 7 table t row 3", other.seed, other.table, other.row)
		}
	}
}

func TestNameHashIsFNV1a(t *testing.T) {
	for _, s := range []string{"", "a", "emb0.table", "a much longer table name"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := initrow.NameHash(s), h.Sum64(); got != want {
			t.Errorf("NameHash(%q) = %#x, fnv-1a %#x", s, got, want)
		}
	}
}

func equal(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
