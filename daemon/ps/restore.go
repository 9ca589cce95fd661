package ps

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/heterps/heterps/daemon/ckpt"
)

// Restore builds the shard cfg describes from the checkpoint in dir, a step
// directory. It reads the manifest first (a directory without one is an
// unfinished checkpoint, refused with ckpt.ErrNoManifest), refuses a
// checkpoint of another job or shard count, checks the shard's file against
// its manifest entry (size and SHA-256), and loads it only if its tables and
// blocks are the ones cfg declares, with the same shapes and optimisers.
// Versions resume from the file; replay windows start empty, so in BSP a
// push for a step up to the checkpoint's is ErrStale.
func Restore(cfg Config, dir string) (*Shard, error) {
	return restore(cfg, dir, false)
}

// RestoreAs is Restore for a new job that continues another's training:
// the checkpoint may be of any job, as long as it is of the same model with
// the same shard count, mode and parameters.
func RestoreAs(cfg Config, dir string) (*Shard, error) {
	return restore(cfg, dir, true)
}

func restore(cfg Config, dir string, anyJob bool) (*Shard, error) {
	fail := func(err error) (*Shard, error) {
		return nil, fmt.Errorf("ps shard %d: restore from %s: %w", cfg.Shard, dir, err)
	}
	m, err := ckpt.ReadManifest(dir)
	if err != nil {
		return fail(err)
	}
	if m.JobID != cfg.Job && !anyJob {
		return fail(fmt.Errorf("the checkpoint is of job %q, not %q", m.JobID, cfg.Job))
	}
	if m.Shards != cfg.Shards {
		if !anyJob {
			return fail(fmt.Errorf("the checkpoint has %d shards, the job now has %d", m.Shards, cfg.Shards))
		}
		s, err := reshard(cfg, dir, m)
		if err != nil {
			return fail(err)
		}
		return s, nil
	}
	path, err := verifiedFile(dir, m, FileName(cfg.Shard, cfg.Shards))
	if err != nil {
		return fail(err)
	}
	s, err := NewShard(cfg)
	if err != nil {
		return nil, err
	}
	f, err := ckpt.Open(path)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if err := s.load(f, m.JobID, m.Step); err != nil {
		return fail(err)
	}
	s.first = m.Step
	return s, nil
}

// RestoreAll restores every shard of a job from dir; cfgs[i] describes
// shard i.
func RestoreAll(cfgs []Config, dir string) ([]*Shard, error) {
	shards := make([]*Shard, len(cfgs))
	for i, cfg := range cfgs {
		s, err := Restore(cfg, dir)
		if err != nil {
			return nil, err
		}
		shards[i] = s
	}
	return shards, nil
}

// verifiedFile returns the path of the listed file name after checking its
// size and SHA-256 against the manifest.
func verifiedFile(dir string, m ckpt.Manifest, name string) (string, error) {
	i := slices.IndexFunc(m.Files, func(e ckpt.FileEntry) bool { return e.Name == name })
	if i < 0 {
		return "", fmt.Errorf("the manifest does not list %s", name)
	}
	want := m.Files[i]
	path := filepath.Join(dir, name)
	got, err := ckpt.DigestFile(path)
	if err != nil {
		return "", err
	}
	if got.Size != want.Size || got.SHA256 != want.SHA256 {
		return "", fmt.Errorf("checkpoint file %s is corrupt: %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s",
			path, got.Size, got.SHA256, want.Size, want.SHA256)
	}
	return path, nil
}

// load fills a new shard from its file. The file has passed its digest,
// but is checked as if hostile: nothing is allocated before the shapes it
// declares are known to be the configured ones.
func (s *Shard) load(f *ckpt.File, job string, step int64) error {
	if err := s.checkFileIdentity(f, job, s.cfg.Shard, s.cfg.Shards, step); err != nil {
		return err
	}
	params, err := s.fileParams(f)
	if err != nil {
		return err
	}
	for _, t := range sortedValues(s.tables) {
		if err := s.loadTable(f, t, params[t.spec.Name], step); err != nil {
			return fmt.Errorf("%s: table %q: %w", f.Name(), t.spec.Name, err)
		}
	}
	for _, b := range sortedValues(s.blocks) {
		if err := s.loadBlock(f, b, params[b.spec.Name], step); err != nil {
			return fmt.Errorf("%s: block %q: %w", f.Name(), b.spec.Name, err)
		}
	}
	return nil
}

// checkFileIdentity checks the file is shard of shards of job's
// checkpoint at step, of the shard's model and in its mode.
func (s *Shard) checkFileIdentity(f *ckpt.File, job string, shard, shards int, step int64) error {
	if err := f.CheckModel(s.cfg.Model); err != nil {
		return err
	}
	got, err := f.Step()
	if err != nil {
		return err
	}
	if got != step {
		return fmt.Errorf("%s is of step %d, the manifest of step %d", f.Name(), got, step)
	}
	want := map[string]string{
		keyJob: job, keyShard: strconv.Itoa(shard),
		keyShards: strconv.Itoa(shards), keyMode: s.cfg.Mode.String(),
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, _ := f.Meta(k); v != want[k] {
			return fmt.Errorf("%s has %s %q, want %q", f.Name(), k, v, want[k])
		}
	}
	return nil
}

// fileParams decodes the file's table and block descriptions and checks
// they name exactly the configured ones.
func (s *Shard) fileParams(f *ckpt.File) (map[string]paramMeta, error) {
	params, err := decodeParams(f)
	if err != nil {
		return nil, err
	}
	for name := range params {
		if s.tables[name] == nil && s.blocks[name] == nil {
			return nil, fmt.Errorf("%s holds %q, which the job does not declare on shard %d", f.Name(), name, s.cfg.Shard)
		}
	}
	for _, name := range slices.Concat(slices.Collect(maps.Keys(s.tables)), slices.Collect(maps.Keys(s.blocks))) {
		if _, ok := params[name]; !ok {
			return nil, fmt.Errorf("%s does not hold %q", f.Name(), name)
		}
	}
	return params, nil
}

// decodeParams decodes a shard file's table and block descriptions.
func decodeParams(f *ckpt.File) (map[string]paramMeta, error) {
	params := make(map[string]paramMeta)
	for k, v := range f.Metadata() {
		name, ok := strings.CutPrefix(k, keyParam)
		if !ok {
			continue
		}
		var m paramMeta
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return nil, fmt.Errorf("%s: metadata %s: %w", f.Name(), k, err)
		}
		params[name] = m
	}
	return params, nil
}

// checkMeta compares a file's description with the configured parameter.
func (s *Shard) checkMeta(m paramMeta, kind string, dim int, o OptimConfig, step int64) error {
	switch want := optimName(o.Hyper.Kind); {
	case m.Kind != kind:
		return fmt.Errorf("the file holds a %s of that name", m.Kind)
	case m.Dim != dim:
		return fmt.Errorf("dim %d in the file, %d in the job", m.Dim, dim)
	case m.Optimizer != want || m.States != o.Hyper.StateBuffers():
		return fmt.Errorf("optimiser %s with %d state buffers in the file, %s with %d in the job",
			m.Optimizer, m.States, want, o.Hyper.StateBuffers())
	case m.Version < 0 || (s.cfg.Mode == BSP && m.Version != step):
		return fmt.Errorf("version %d in a checkpoint of step %d", m.Version, step)
	}
	return nil
}

func (s *Shard) loadTable(f *ckpt.File, t *table, m paramMeta, step int64) error {
	if err := s.checkMeta(m, "table", t.spec.Dim, t.spec.Optim, step); err != nil {
		return err
	}
	if m.Rows < 0 || m.Rows > s.cfg.MaxRows {
		return fmt.Errorf("%d rows, the shard's cap is %d: %w", m.Rows, s.cfg.MaxRows, ErrRowCap)
	}
	if err := checkTableShapes(f, t, m.Rows); err != nil {
		return err
	}
	ids, err := f.Int64(t.spec.Name + idsSuffix)
	if err != nil {
		return err
	}
	if i := firstDuplicate(ids); i >= 0 {
		return fmt.Errorf("ids[%d] = %d is listed twice", i, ids[i])
	}
	if err := s.checkOwned(ids); err != nil {
		return err
	}
	if err := s.reserveRows(t, len(ids)); err != nil {
		return err
	}
	for _, id := range ids {
		t.add(id)
	}
	t.version = m.Version
	return t.readSlabs(f)
}

// readSlabs reads the values and state of every row, slab by slab.
func (t *table) readSlabs(f *ckpt.File) error {
	d := t.spec.Dim
	for si, sl := range t.slabs {
		first := t.sizes.start(si)
		n := min(t.sizes.rows(si), len(t.ids)-first)
		bufs := append([][]float32{sl.value}, sl.state...)
		for i, buf := range bufs {
			if err := f.ReadFloat32At(stateName(t.spec.Name, i-1), buf[:n*d], int64(first*d)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Shard) loadBlock(f *ckpt.File, b *block, m paramMeta, step int64) error {
	if err := s.checkMeta(m, "block", len(b.value), b.spec.Optim, step); err != nil {
		return err
	}
	bufs := append([][]float32{b.value}, b.state...)
	for i, buf := range bufs {
		if err := checkShape(f, stateName(b.spec.Name, i-1), ckpt.F32, int64(len(buf))); err != nil {
			return err
		}
		if err := f.ReadFloat32(stateName(b.spec.Name, i-1), buf); err != nil {
			return err
		}
	}
	b.version = m.Version
	return nil
}

// checkTableShapes checks a file holds table t's ids, values and state
// for rows rows.
func checkTableShapes(f *ckpt.File, t *table, rows int) error {
	n, d := int64(rows), int64(t.spec.Dim)
	if err := checkShape(f, t.spec.Name+idsSuffix, ckpt.I64, n); err != nil {
		return err
	}
	for i := -1; i < t.nstate; i++ {
		if err := checkShape(f, stateName(t.spec.Name, i), ckpt.F32, n, d); err != nil {
			return err
		}
	}
	return nil
}

func checkShape(f *ckpt.File, name string, dt ckpt.DType, shape ...int64) error {
	t, ok := f.Tensor(name)
	if !ok {
		return fmt.Errorf("%s has no tensor %q", f.Name(), name)
	}
	if t.DType != dt || !slices.Equal(t.Shape, shape) {
		return fmt.Errorf("%s: tensor %q is %s %v, want %s %v", f.Name(), name, t.DType, t.Shape, dt, shape)
	}
	return nil
}
