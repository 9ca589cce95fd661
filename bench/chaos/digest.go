package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/heterps/heterps/daemon/ckpt"
)

// idsSuffix names a PS table's ids tensor ("<table>.ids"), as daemon/ps
// writes it.
const idsSuffix = ".ids"

// ckptDigest says what the final checkpoint of a run holds.
type ckptDigest struct {
	step int64
	dir  string
	// files is the manifest's SHA-256 of every file, by name: identical
	// only if the files are byte for byte, metadata (job id) included.
	files map[string]string
	// values is one SHA-256 over every parameter and optimiser state,
	// table rows in id order across all shards: equal when the trained
	// state is, whatever job wrote it, however it was sharded and in
	// whichever order its rows were created.
	values string
}

// digestLatest digests the latest complete checkpoint under root.
func digestLatest(root string) (ckptDigest, error) {
	cp, err := ckpt.LatestComplete(root)
	if err != nil {
		return ckptDigest{}, err
	}
	d := ckptDigest{step: cp.Manifest.Step, dir: cp.Dir, files: map[string]string{}}
	var paths []string
	for _, f := range cp.Manifest.Files {
		d.files[f.Name] = f.SHA256
		paths = append(paths, filepath.Join(cp.Dir, f.Name))
	}
	if d.values, err = valuesDigest(paths); err != nil {
		return ckptDigest{}, err
	}
	return d, nil
}

// table is one embedding table gathered from every shard: its rows' ids,
// and for each of its tensors (value, optimiser states) the rows.
type table struct {
	dim  int
	ids  []int64
	bufs map[string][]float32 // tensor name -> rows, len(ids) x dim
}

// valuesDigest hashes the parameters in shard files: blocks as they are
// (each lives whole in one shard), tables row by row in id order.
func valuesDigest(paths []string) (string, error) {
	tables := map[string]*table{}
	blocks := map[string][]byte{}
	for _, p := range paths {
		if err := gather(p, tables, blocks); err != nil {
			return "", err
		}
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(blocks)) {
		fmt.Fprintf(h, "block %s %d\n", name, len(blocks[name]))
		h.Write(blocks[name])
	}
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		hashTable(h, name, tables[name])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// gather reads one shard file's tensors into tables and blocks.
func gather(path string, tables map[string]*table, blocks map[string][]byte) error {
	f, err := ckpt.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	infos := f.Tensors()
	isTable := map[string]bool{}
	for _, t := range infos {
		if base, ok := strings.CutSuffix(t.Name, idsSuffix); ok {
			isTable[base] = true
		}
	}
	for _, t := range infos {
		base, ok := strings.CutSuffix(t.Name, idsSuffix)
		switch {
		case ok:
			ids, err := f.Int64(t.Name)
			if err != nil {
				return err
			}
			tab := tables[base]
			if tab == nil {
				tab = &table{bufs: map[string][]float32{}}
				tables[base] = tab
			}
			tab.ids = append(tab.ids, ids...)
		case isTable[tableOf(t.Name)]:
			rows, err := f.Float32(t.Name)
			if err != nil {
				return err
			}
			tab := tables[tableOf(t.Name)]
			if tab == nil {
				tab = &table{bufs: map[string][]float32{}}
				tables[tableOf(t.Name)] = tab
			}
			if len(t.Shape) == 2 {
				tab.dim = int(t.Shape[1])
			}
			tab.bufs[t.Name] = append(tab.bufs[t.Name], rows...)
		default:
			sec, _, err := f.Section(t.Name)
			if err != nil {
				return err
			}
			raw, err := io.ReadAll(sec)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			blocks[t.Name] = raw
		}
	}
	return nil
}

// tableOf is the table a tensor belongs to: "<table>" or "<table>.optN".
func tableOf(tensor string) string {
	if i := strings.LastIndex(tensor, ".opt"); i > 0 {
		return tensor[:i]
	}
	return tensor
}

// hashTable writes a table's rows in id order: id, then the row of each of
// its tensors in name order.
func hashTable(h io.Writer, name string, t *table) {
	order := make([]int, len(t.ids))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(t.ids[a], t.ids[b]) })
	bufNames := slices.Sorted(maps.Keys(t.bufs))
	fmt.Fprintf(h, "table %s %d %d %s\n", name, len(t.ids), t.dim, strings.Join(bufNames, ","))
	var word [8]byte
	for _, i := range order {
		binary.LittleEndian.PutUint64(word[:], uint64(t.ids[i]))
		h.Write(word[:])
		for _, b := range bufNames {
			rows := t.bufs[b]
			for _, v := range rows[i*t.dim : min((i+1)*t.dim, len(rows))] {
				binary.LittleEndian.PutUint32(word[:4], math.Float32bits(v))
				h.Write(word[:4])
			}
		}
	}
}

// identical compares a run's final checkpoint with the reference run's.
func identical(ref, got ckptDigest) string {
	switch {
	case ref.values == "" || got.values == "":
		return "n/a"
	case ref.step != got.step:
		return fmt.Sprintf("no (step %d vs %d)", got.step, ref.step)
	case filesEqual(ref.files, got.files):
		return "yes (files)"
	case ref.values == got.values:
		return "yes (values)"
	default:
		return "no"
	}
}

// filesEqual reports whether two manifests list the same files with the
// same SHA-256.
func filesEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
