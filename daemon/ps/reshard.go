package ps

import (
	"fmt"

	"github.com/heterps/heterps/daemon/ckpt"
)

// reshardChunk is how many rows of an old shard file are read at a time
// (a variable so that tests cross chunk boundaries).
var reshardChunk = 4096

// reshard builds shard cfg.Shard of cfg.Shards from a BSP checkpoint of
// m.Shards shards (another count): every old file is verified and read in
// chunks, each table keeping the rows of the ids it owns now (ShardOf),
// and each of the shard's blocks comes from the old file that held it
// (BlockShard). In ASP a table's version counts the pushes its old shards
// applied, nearly alike as every push reaches every shard: the new shard's
// table takes the largest.
func reshard(cfg Config, dir string, m ckpt.Manifest) (*Shard, error) {
	s, err := NewShard(cfg)
	if err != nil {
		return nil, err
	}
	loaded := map[string]bool{}
	for j := range m.Shards {
		if err := s.loadPart(dir, m, j, loaded); err != nil {
			return nil, err
		}
	}
	for name := range s.blocks {
		if !loaded[name] {
			return nil, fmt.Errorf("no file of the checkpoint holds block %q", name)
		}
	}
	s.first = m.Step
	return s, nil
}

// loadPart takes from old shard file j what the new shard owns; loaded
// records the blocks taken.
func (s *Shard) loadPart(dir string, m ckpt.Manifest, j int, loaded map[string]bool) error {
	path, err := verifiedFile(dir, m, FileName(j, m.Shards))
	if err != nil {
		return err
	}
	f, err := ckpt.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := s.checkFileIdentity(f, m.JobID, j, m.Shards, m.Step); err != nil {
		return err
	}
	params, err := decodeParams(f)
	if err != nil {
		return err
	}
	for name, pm := range params {
		if pm.Kind == "table" && s.tables[name] == nil {
			return fmt.Errorf("%s holds table %q, which the job does not declare", f.Name(), name)
		}
	}
	for _, t := range sortedValues(s.tables) {
		pm, ok := params[t.spec.Name]
		if !ok {
			return fmt.Errorf("%s does not hold %q", f.Name(), t.spec.Name)
		}
		if err := s.takeRows(f, t, pm, m.Step); err != nil {
			return fmt.Errorf("%s: table %q: %w", f.Name(), t.spec.Name, err)
		}
	}
	for _, b := range sortedValues(s.blocks) {
		if BlockShard(b.spec.Name, m.Shards) != j {
			continue
		}
		pm, ok := params[b.spec.Name]
		if !ok {
			return fmt.Errorf("%s does not hold block %q, which lives on its shard", f.Name(), b.spec.Name)
		}
		if err := s.loadBlock(f, b, pm, m.Step); err != nil {
			return fmt.Errorf("%s: block %q: %w", f.Name(), b.spec.Name, err)
		}
		loaded[b.spec.Name] = true
	}
	return nil
}

// takeRows appends to t the rows of an old shard file's table whose ids
// this shard owns, values and optimiser state, reading reshardChunk rows at
// a time.
func (s *Shard) takeRows(f *ckpt.File, t *table, pm paramMeta, step int64) error {
	if err := s.checkMeta(pm, "table", t.spec.Dim, t.spec.Optim, step); err != nil {
		return err
	}
	if pm.Rows < 0 {
		return fmt.Errorf("%d rows", pm.Rows)
	}
	if err := checkTableShapes(f, t, pm.Rows); err != nil {
		return err
	}
	ids := make([]int64, reshardChunk)
	bufs := make([][]float32, 1+t.nstate)
	for i := range bufs {
		bufs[i] = make([]float32, reshardChunk*t.spec.Dim)
	}
	for off := 0; off < pm.Rows; off += reshardChunk {
		k := min(reshardChunk, pm.Rows-off)
		if err := s.takeChunk(f, t, off, ids[:k], bufs); err != nil {
			return err
		}
	}
	t.version = max(t.version, pm.Version)
	return nil
}

// takeChunk reads rows [off, off+len(ids)) of an old file's table and
// appends those this shard owns.
func (s *Shard) takeChunk(f *ckpt.File, t *table, off int, ids []int64, bufs [][]float32) error {
	d := t.spec.Dim
	if err := f.ReadInt64At(t.spec.Name+idsSuffix, ids, int64(off)); err != nil {
		return err
	}
	var mine []int
	for r, id := range ids {
		if ShardOf(id, s.cfg.Shards) == s.cfg.Shard {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	if err := s.reserveRows(t, len(mine)); err != nil {
		return err
	}
	for i := range bufs {
		if err := f.ReadFloat32At(stateName(t.spec.Name, i-1), bufs[i][:len(ids)*d], int64(off*d)); err != nil {
			return err
		}
	}
	for _, r := range mine {
		if _, dup := t.slot.get(ids[r]); dup {
			return fmt.Errorf("id %d is listed twice in the checkpoint", ids[r])
		}
		slot := t.add(ids[r])
		copy(t.row(slot), bufs[0][r*d:(r+1)*d])
		for i := range t.nstate {
			copy(t.stateRow(slot, i), bufs[i+1][r*d:(r+1)*d])
		}
	}
	return nil
}
