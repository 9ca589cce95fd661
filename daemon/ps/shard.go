package ps

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heterps/heterps/native"
)

// Mode is how a shard combines the pushes of a stage's replicas.
type Mode int

// Modes.
const (
	BSP Mode = iota // bulk-synchronous: one weighted update per step
	ASP             // asynchronous: each push applied on arrival
)

func (m Mode) String() string {
	switch m {
	case BSP:
		return "bsp"
	case ASP:
		return "asp"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults for the zero values of Config.
const (
	DefaultMaxRows     = 1 << 24
	DefaultSlabRows    = 4096
	DefaultWaitTimeout = 5 * time.Minute
)

// Config describes one shard of a job.
type Config struct {
	Job    string // pushes and checkpoints of another job are refused
	Model  string // the model name written into checkpoints and checked on restore
	Shard  int    // this shard's index, in [0, Shards)
	Shards int    // the job's shard count
	Mode   Mode

	// Replicas maps each stage that owns a table or block to its replica
	// count: its members are replicas 0..n-1 until SetMembers changes them.
	Replicas map[int]int
	Tables   []TableSpec
	Blocks   []BlockSpec

	MaxRows int // rows of all tables together; 0 = DefaultMaxRows
	// MemoryBytes is the shard's memory budget in bytes (0 = unlimited):
	// blocks with their optimiser state, and table rows at RowBytes each.
	// A pull or push that would create rows past it fails with
	// ErrMemoryBudget, creating none; the shard goes on serving.
	MemoryBytes int64
	SlabRows    int // rows per slab; 0 = slabs growing from DefaultSlabRows to about 4 MiB a buffer (slab.go)
	// WaitTimeout is the longest wait of a pull whose context has no
	// deadline, and how long a checkpoint waits for its step without any
	// update coming (it waits while training goes on, however long that
	// takes); 0 = DefaultWaitTimeout.
	WaitTimeout time.Duration

	// Backend runs the weighted sums and optimiser updates. It must keep
	// buffers in host memory (the CPU backend): slabs are Go memory.
	Backend native.Backend
}

// TableSpec declares a sparse embedding table.
type TableSpec struct {
	Name      string
	Dim       int
	Stage     int // the stage whose replicas push to it
	Optim     OptimConfig
	InitSeed  uint64  // rows start as initrow.Fill(row, InitSeed, Name, id, InitLimit)
	InitLimit float64 // half-width of the uniform initialisation
}

// BlockSpec declares a dense parameter block.
type BlockSpec struct {
	Name  string
	Stage int
	Init  []float32 // initial values; the block's length is len(Init)
	Optim OptimConfig
}

// Errors the shard's methods wrap.
var (
	ErrArg            = errors.New("invalid argument")
	ErrUnknown        = errors.New("no such table or block")
	ErrWrongJob       = errors.New("push for another job")
	ErrWrongShard     = errors.New("id belongs to another shard")
	ErrStale          = errors.New("stale push")
	ErrAhead          = errors.New("push ahead of the open step")
	ErrRowCap         = errors.New("row cap reached")
	ErrMemoryBudget   = errors.New("memory budget reached")
	ErrCheckpointBusy = errors.New("a checkpoint is already in progress")
	ErrStepPassed     = errors.New("step already passed")
	ErrShardClosed    = errors.New("shard closed")
	ErrStalled        = errors.New("no update came")
)

// Shard is one parameter-server shard. Its methods are safe for concurrent
// use.
type Shard struct {
	cfg     Config
	backend native.Backend
	tables  map[string]*table // fixed after NewShard: read without a lock
	blocks  map[string]*block

	rows  atomic.Int64 // rows of all tables, against cfg.MaxRows
	bytes atomic.Int64 // blocks and rows, against cfg.MemoryBytes

	// members holds each stage's replica set over the steps. Lock order:
	// a table's or block's lock, then membersMu.
	membersMu sync.Mutex
	members   map[int]*membership

	// fence is the step a checkpoint holds the shard at (BSP: later steps
	// are not applied) or -1; ckptMu lets one checkpoint run at a time.
	fence  atomic.Int64
	ckptMu sync.Mutex

	// first is the step training starts after: the checkpoint's step for a
	// restored shard, else 0. ASP checkpoints wait for the pushes since.
	first int64

	closed    chan struct{} // closed by Close: waits end
	closeOnce sync.Once
}

// NewShard returns an empty shard: no table rows yet, blocks at their
// initial values, every version 0.
func NewShard(cfg Config) (*Shard, error) {
	cfg = withDefaults(cfg)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("ps shard %d: %w", cfg.Shard, err)
	}
	s := &Shard{
		cfg: cfg, backend: cfg.Backend,
		tables:  make(map[string]*table, len(cfg.Tables)),
		blocks:  make(map[string]*block, len(cfg.Blocks)),
		members: make(map[int]*membership, len(cfg.Replicas)),
		closed:  make(chan struct{}),
	}
	for stage, n := range cfg.Replicas {
		s.members[stage] = firstMembers(n)
	}
	s.fence.Store(-1)
	for _, spec := range cfg.Tables {
		s.tables[spec.Name] = newTable(spec, cfg.SlabRows)
	}
	if err := s.reserveBlocks(); err != nil {
		return nil, fmt.Errorf("ps shard %d: %w", cfg.Shard, err)
	}
	for _, spec := range cfg.Blocks {
		s.blocks[spec.Name] = newBlock(spec)
	}
	return s, nil
}

func withDefaults(cfg Config) Config {
	if cfg.MaxRows == 0 {
		cfg.MaxRows = DefaultMaxRows
	}
	if cfg.SlabRows == 0 {
		cfg.SlabRows = DefaultSlabRows
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	return cfg
}

func (cfg *Config) validate() error {
	switch {
	case cfg.Job == "":
		return fmt.Errorf("no job id: %w", ErrArg)
	case cfg.Shards < 1 || cfg.Shard < 0 || cfg.Shard >= cfg.Shards:
		return fmt.Errorf("shard %d of %d: %w", cfg.Shard, cfg.Shards, ErrArg)
	case cfg.Mode != BSP && cfg.Mode != ASP:
		return fmt.Errorf("mode %v: %w", cfg.Mode, ErrArg)
	case cfg.MaxRows < 0 || cfg.SlabRows < 0 || cfg.WaitTimeout < 0 || cfg.MemoryBytes < 0:
		return fmt.Errorf("negative limit (max rows %d, slab rows %d, wait %v, memory %d): %w",
			cfg.MaxRows, cfg.SlabRows, cfg.WaitTimeout, cfg.MemoryBytes, ErrArg)
	case cfg.Backend == nil:
		return fmt.Errorf("no backend: %w", ErrArg)
	}
	if _, ok := native.Host(cfg.Backend.Alloc(0)); !ok {
		return fmt.Errorf("backend %s keeps buffers off the host; the parameter server needs the CPU backend: %w",
			cfg.Backend.Name(), ErrArg)
	}
	for st, n := range cfg.Replicas {
		if n < 1 {
			return fmt.Errorf("stage %d has %d replicas: %w", st, n, ErrArg)
		}
	}
	return cfg.validateParams()
}

// validateParams checks every table and block, and that their checkpoint
// tensor names cannot collide.
func (cfg *Config) validateParams() error {
	owners := make(map[string]string)
	claim := func(owner string, tensors []string) error {
		for _, name := range tensors {
			if prev, ok := owners[name]; ok {
				return fmt.Errorf("%q and %q both need the checkpoint tensor %q: %w", prev, owner, name, ErrArg)
			}
			owners[name] = owner
		}
		return nil
	}
	for _, t := range cfg.Tables {
		if err := cfg.validateParam("table", t.Name, t.Stage, t.Optim); err != nil {
			return err
		}
		if t.Dim < 1 || math.IsNaN(t.InitLimit) || math.IsInf(t.InitLimit, 0) || t.InitLimit < 0 {
			return fmt.Errorf("table %q: dim %d, init limit %g: %w", t.Name, t.Dim, t.InitLimit, ErrArg)
		}
		if err := claim(t.Name, append(tensorNames(t.Name, t.Optim), t.Name+idsSuffix)); err != nil {
			return err
		}
	}
	for _, b := range cfg.Blocks {
		if err := cfg.validateParam("block", b.Name, b.Stage, b.Optim); err != nil {
			return err
		}
		if err := claim(b.Name, tensorNames(b.Name, b.Optim)); err != nil {
			return err
		}
	}
	return nil
}

// tensorNames lists a parameter's value and state tensors.
func tensorNames(name string, o OptimConfig) []string {
	out := []string{name}
	for i := range o.Hyper.StateBuffers() {
		out = append(out, stateName(name, i))
	}
	return out
}

func (cfg *Config) validateParam(kind, name string, stage int, o OptimConfig) error {
	if name == "" {
		return fmt.Errorf("%s with no name: %w", kind, ErrArg)
	}
	if _, ok := cfg.Replicas[stage]; !ok {
		return fmt.Errorf("%s %q: stage %d has no replica count in Replicas: %w", kind, name, stage, ErrArg)
	}
	if err := o.validate(); err != nil {
		return fmt.Errorf("%s %q: %w", kind, name, err)
	}
	return nil
}

// Rows returns the number of table rows the shard holds.
func (s *Shard) Rows() int { return int(s.rows.Load()) }

// Index is the shard's index among its job's shards.
func (s *Shard) Index() int { return s.cfg.Shard }

// Version returns the version of the named table or block.
func (s *Shard) Version(name string) (int64, error) {
	st, err := s.stepped(name)
	if err != nil {
		return 0, err
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.version, nil
}

func (s *Shard) stepped(name string) (*stepped, error) {
	if t, ok := s.tables[name]; ok {
		return &t.stepped, nil
	}
	if b, ok := s.blocks[name]; ok {
		return &b.stepped, nil
	}
	return nil, fmt.Errorf("ps shard %d: %q: %w", s.cfg.Shard, name, ErrUnknown)
}

func (s *Shard) table(name string) (*table, error) {
	t, ok := s.tables[name]
	if !ok {
		return nil, fmt.Errorf("ps shard %d: table %q: %w", s.cfg.Shard, name, ErrUnknown)
	}
	return t, nil
}

func (s *Shard) block(name string) (*block, error) {
	b, ok := s.blocks[name]
	if !ok {
		return nil, fmt.Errorf("ps shard %d: block %q: %w", s.cfg.Shard, name, ErrUnknown)
	}
	return b, nil
}

// all returns every table's and block's stepped state, tables first, each
// group by name: the order checkpoints lock them in.
func (s *Shard) all() []*stepped {
	var out []*stepped
	for _, p := range s.params() {
		out = append(out, p.stepped)
	}
	return out
}

// param is a table's or block's state and the stage that pushes to it.
type param struct {
	*stepped
	stage int
}

// params returns every table's and block's state, tables first, each
// kind by name.
func (s *Shard) params() []param {
	var out []param
	for _, t := range sortedValues(s.tables) {
		out = append(out, param{&t.stepped, t.spec.Stage})
	}
	for _, b := range sortedValues(s.blocks) {
		out = append(out, param{&b.stepped, b.spec.Stage})
	}
	return out
}

// Reached reports whether the shard holds everything of step: in BSP,
// every table and block has applied it; in ASP, every member of the stage
// pushing to a table or block has had its pushes of each step up to it
// accepted (in ASP the shard may hold later pushes too).
func (s *Shard) Reached(step int64) bool {
	for _, p := range s.params() {
		members := s.membersAt(p.stage, step)
		p.mu.RLock()
		ok := p.version >= step
		if s.cfg.Mode == ASP {
			ok = p.pushedThrough(members, s.first, step)
		}
		p.mu.RUnlock()
		if !ok {
			return false
		}
	}
	return true
}

func sortedValues[V any](m map[string]V) []V {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	out := make([]V, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// Close ends every wait for a version, now and later, with ErrShardClosed:
// the shard's owner calls it when the job leaves, so that no caller waits
// on a step that will never be applied. The shard's data stays readable.
func (s *Shard) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// waitCtx bounds a wait by Config.WaitTimeout when ctx has no deadline.
func (s *Shard) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.WaitTimeout)
}
