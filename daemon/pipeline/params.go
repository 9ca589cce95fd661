package pipeline

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/internal/radix"
	"github.com/heterps/heterps/native"
)

// Range is a stage's layers, [First, Last], 0-based as in a plan.
type Range struct{ First, Last int }

// ErrUnsupported marks model features the distributed runtime does not run.
var ErrUnsupported = errors.New("not supported in distributed training yet")

// BuildStageModel builds cfg for a worker of the stage running layers r:
// its embedding and NCE tables hold no rows (the parameter servers do; the
// worker pulls a batch's) and only r's dense parameters have values, so
// that the stage's memory does not grow with the vocabulary.
func BuildStageModel(b native.Backend, cfg *config.Model, seed uint64, r Range) (*nn.Model, error) {
	return nn.BuildWith(b, cfg, seed, nn.BuildOptions{RemoteTables: true, DenseLayers: &nn.LayerRange{First: r.First, Last: r.Last}})
}

// DeclareModel builds cfg for PSParams: every dense parameter with its
// initial values and the tables without rows, which the parameter servers
// create lazily.
func DeclareModel(b native.Backend, cfg *config.Model, seed uint64) (*nn.Model, error) {
	return nn.BuildWith(b, cfg, seed, nn.BuildOptions{RemoteTables: true})
}

// PSParams declares a model's parameters for the parameter servers: a
// table for each embedding layer and a block for each dense parameter,
// each owned by the stage whose range holds its layer, with the optimiser
// and schedule single-process training uses (nn.NewOptimizer). Tables
// start from the model's seed and embedding scale, blocks from m's values.
func PSParams(m *nn.Model, stages []Range, totalSteps int64) ([]ps.TableSpec, []ps.BlockSpec, error) {
	cfg := m.Config
	if cfg.Optimizer.ClipNorm > 0 {
		return nil, nil, fmt.Errorf("pipeline: clip_norm (a global gradient norm across stages): %w", ErrUnsupported)
	}
	dense, sparse := psOptim(cfg.Optimizer, totalSteps), psOptim(cfg.Optimizer, totalSteps)
	if cfg.SparseOptimizer != nil {
		sparse = psOptim(*cfg.SparseOptimizer, totalSteps)
	}
	scale := nn.DefaultEmbeddingScale
	if cfg.Init != nil && cfg.Init.EmbeddingScale > 0 {
		scale = cfg.Init.EmbeddingScale
	}
	var (
		tables []ps.TableSpec
		blocks []ps.BlockSpec
	)
	for st, r := range stages {
		for i := r.First; i <= r.Last; i++ {
			for _, p := range m.LayerParams(i) {
				if p.Sparse {
					switch m.Layer(i).(type) {
					case *nn.Embedding, *nn.NCE: // rows start as initrow makes them, with the same seed and scale
					default:
						return nil, nil, fmt.Errorf("pipeline: sparse parameter %s of layer %d: %w", p.Name, i, ErrUnsupported)
					}
					tables = append(tables, ps.TableSpec{Name: p.Name, Dim: p.Cols, Stage: st, Optim: sparse,
						InitSeed: m.Seed, InitLimit: scale})
					continue
				}
				h, ok := native.Host(p.Value)
				if !ok {
					return nil, nil, fmt.Errorf("pipeline: %s: build the model on the CPU backend to declare it", p.Name)
				}
				if len(h) != p.Len() {
					return nil, nil, fmt.Errorf("pipeline: %s holds %d of its %d values: declare the model with DeclareModel", p.Name, len(h), p.Len())
				}
				blocks = append(blocks, ps.BlockSpec{Name: p.Name, Stage: st, Init: slices.Clone(h), Optim: dense})
			}
		}
	}
	return tables, blocks, nil
}

func psOptim(o config.Optimizer, total int64) ps.OptimConfig {
	h := nn.NativeOptim(o, 1, total)
	h.LR, h.Step = 0, 0
	return ps.OptimConfig{Hyper: h, LR: o.LR, Warmup: int64(o.Warmup),
		Cosine: o.Schedule == "cosine", TotalSteps: total}
}

// MirrorStage is the stage under which the parameter servers keep the
// dense blocks of stage st (of a job of stages stages) when st syncs them
// by allreduce: a stage of one replica, the ring's first member, which
// assigns the blocks their values and optimiser state at checkpoint steps
// (Allreduce.Mirror), so that the servers' checkpoints hold the replicas'
// bits.
func MirrorStage(st, stages int) int { return stages + st }

// MirrorBlocks moves the blocks of the stages that sync by allreduce
// (allreduce[st]) of a job of stages stages to their MirrorStage.
func MirrorBlocks(blocks []ps.BlockSpec, stages int, allreduce []bool) {
	for i, b := range blocks {
		if b.Stage < len(allreduce) && allreduce[b.Stage] {
			blocks[i].Stage = MirrorStage(b.Stage, stages)
		}
	}
}

// ShardSpec is what ShardConfigs needs besides the parameters.
type ShardSpec struct {
	Job, Model string
	Shards     int
	Mode       ps.Mode
	Replicas   []int // per stage
	// Allreduce marks the stages that sync their dense blocks by
	// allreduce: their MirrorStage has one replica (MirrorBlocks).
	Allreduce   []bool
	WaitTimeout time.Duration
	Backend     native.Backend // the CPU backend
}

// ShardConfigs returns the configuration of every shard: every table on
// every shard (rows spread by ps.ShardOf), each block on ps.BlockShard.
func ShardConfigs(spec ShardSpec, tables []ps.TableSpec, blocks []ps.BlockSpec) []ps.Config {
	replicas := map[int]int{}
	for st, n := range spec.Replicas {
		replicas[st] = n
	}
	for st, on := range spec.Allreduce {
		if on {
			replicas[MirrorStage(st, len(spec.Replicas))] = 1
		}
	}
	out := make([]ps.Config, spec.Shards)
	for i := range out {
		out[i] = ps.Config{Job: spec.Job, Model: spec.Model, Shard: i, Shards: spec.Shards, Mode: spec.Mode,
			Replicas: replicas, Tables: tables, WaitTimeout: spec.WaitTimeout, Backend: spec.Backend}
	}
	for _, b := range blocks {
		i := ps.BlockShard(b.Name, spec.Shards)
		out[i].Blocks = append(out[i].Blocks, b)
	}
	return out
}

// sparseTable is a layer of the stage with a sparse table on the
// parameter servers, an embedding or an NCE output layer. Locally the table
// holds only the rows of the current batch: for an embedding, row k is the
// batch's k-th distinct id (ascending), filled where the layer's slots use
// it; for NCE, the rows of the batch's targets and negatives (nn.NCE.Rows).
type sparseTable struct {
	embedding *nn.Embedding // one of embedding and nce is set
	nce       *nn.NCE
	index     int // the layer's index in the model
	table     *nn.Param
}

// rowPlan is a batch's ids renumbered for a stage's sparse tables. It
// depends on the batch alone, so stage 0 works it out while the previous
// step runs.
type rowPlan struct {
	local  *data.Batch // the batch with its ids renumbered: embedding rows
	tables []tablePlan // per sparse table of the stage
}

// tablePlan is one sparse table's rows for a batch.
type tablePlan struct {
	ids  []int64 // the global id of each local row, ascending
	used []int64 // the local rows the batch reads (and pulls), ascending
}

// planRows plans b's rows for the sparse tables.
func planRows(b *data.Batch, tables []sparseTable) (*rowPlan, error) {
	local := *b
	plan := &rowPlan{local: &local}
	var uniq []int64
	uniq, local.IDs = localIDs(b.IDs)
	for _, t := range tables {
		if t.nce != nil {
			if len(b.Classes) != b.Size {
				return nil, fmt.Errorf("%s: the batch has %d target classes for %d rows", t.table.Name, len(b.Classes), b.Size)
			}
			ids := t.nce.Rows(b)
			plan.tables = append(plan.tables, tablePlan{ids: ids, used: iota64(len(ids))})
			continue
		}
		first, end := t.embedding.SlotRange()
		if local.Slots < end {
			return nil, fmt.Errorf("%s: batch has %d slots, the layer reads [%d, %d)", t.table.Name, local.Slots, first, end)
		}
		used := slotIDs(local.Offsets, local.IDs, len(uniq), local.Slots, first, end)
		plan.tables = append(plan.tables, tablePlan{ids: uniq, used: used})
	}
	return plan, nil
}

// iota64 returns 0, 1, ..., n-1.
func iota64(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// localIDs maps the batch's ids to compact rows: uniq holds the distinct
// ids ascending, and the returned ids index into it. Ids spanning few
// values for their count (a vocabulary of up to ~1,000 rows an id: a
// ctrdnn batch's 13,312 ids of 10^6) are marked in a bitmap of the span,
// and each id's row is the count of marks below it (bitmapIDs); others are
// sorted with their positions by a radix sort on id - min (a few byte
// passes). Both are several times faster than a comparison sort and a
// binary search per id.
func localIDs(ids []int64) (uniq, local []int64) {
	local = make([]int64, len(ids))
	if len(ids) == 0 {
		return nil, local
	}
	lo, hi := ids[0], ids[0]
	for _, id := range ids[1:] { // one pass, not slices.Min's and Max's two
		lo, hi = min(lo, id), max(hi, id)
	}
	if span := uint64(hi) - uint64(lo); span < bitmapSpan(len(ids)) {
		return bitmapIDs(ids, local, lo, span), local
	}
	scratch := radix.GetBuffers(len(ids))
	defer radix.PutBuffers(scratch)
	keys, pos := scratch.Keys, scratch.Vals
	for i, id := range ids {
		keys[i], pos[i] = uint64(id)-uint64(lo), int32(i)
	}
	radix.Pairs(keys, pos, uint64(hi)-uint64(lo))
	distinct := 1
	for j := 1; j < len(keys); j++ {
		if keys[j] != keys[j-1] {
			distinct++
		}
	}
	uniq = make([]int64, 0, distinct)
	for j, k := range keys {
		if j == 0 || k != keys[j-1] {
			uniq = append(uniq, int64(k+uint64(lo)))
		}
		local[pos[j]] = int64(len(uniq) - 1)
	}
	return uniq, local
}

// bitmapSpan is the widest span of values bitmapIDs takes for n ids: its
// passes over the bitmap's words cost about what the radix sort's passes
// over the ids cost at 1,024 values an id.
func bitmapSpan(n int) uint64 { return max(1<<16, 1024*uint64(n)) }

// bitmap is bitmapIDs' scratch: the marks, zeroed between uses, and the
// count of marks in the words before each word.
type bitmap struct {
	marks []uint64
	below []int32
}

var bitmaps sync.Pool // of *bitmap

// bitmapIDs is localIDs for ids in [lo, lo+span]: it fills local and
// returns uniq.
func bitmapIDs(ids, local []int64, lo int64, span uint64) (uniq []int64) {
	words := int(span/64) + 1
	b, _ := bitmaps.Get().(*bitmap)
	if b == nil || cap(b.marks) < words {
		b = &bitmap{marks: make([]uint64, words), below: make([]int32, words)}
	}
	bm, below := b.marks[:words], b.below[:words]
	defer func() {
		for _, id := range ids { // only the words marked: clear(bm) would walk the whole span
			bm[(uint64(id)-uint64(lo))>>6] = 0
		}
		bitmaps.Put(b)
	}()
	for _, id := range ids {
		k := uint64(id) - uint64(lo)
		bm[k>>6] |= 1 << (k & 63)
	}
	n := 0
	for w, word := range bm {
		below[w] = int32(n)
		n += bits.OnesCount64(word)
	}
	uniq = make([]int64, n)
	for i, id := range ids { // no walk over the bitmap's bits: its branches mispredict
		k := uint64(id) - uint64(lo)
		w := k >> 6
		local[i] = int64(below[w]) + int64(bits.OnesCount64(bm[w]&(1<<(k&63)-1)))
		uniq[local[i]] = id
	}
	return uniq
}

// slotIDs returns the distinct compact rows (of n), ascending, that slots
// [first, end) of a batch with the given offsets use.
func slotIDs(offsets, local []int64, n, slots, first, end int) []int64 {
	if first == 0 && end == slots { // every bag: the n rows are the batch's ids
		return iota64(n)
	}
	used := make([]bool, n)
	for j := 0; j+1 < len(offsets); j++ {
		if slot := j % slots; slot >= first && slot < end {
			for _, k := range local[offsets[j]:offsets[j+1]] {
				used[k] = true
			}
		}
	}
	var out []int64
	for k, u := range used {
		if u {
			out = append(out, int64(k))
		}
	}
	return out
}
