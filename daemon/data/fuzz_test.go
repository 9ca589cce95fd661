package data

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReaders feeds arbitrary bytes to every reader, strict and skipping:
// none may panic, and every batch they return must be well formed.
func FuzzReaders(f *testing.F) {
	for _, name := range []string{"criteo_sample.csv", "avazu_sample.csv"} {
		lines, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(strings.Join(strings.SplitN(string(lines), "\n", 4)[:3], "\n"))
	}
	f.Add("1\t5\t\t-3\t\t\t\t\t\t\t\t\t\t\t" + strings.Repeat("ab12\t", 25) + "\n")
	f.Add("+1 1:0.5 3:2\n-1 7:1\n")
	f.Add("\x1f\x8b\x08")
	f.Add("0,0,5,13,9,1,0,0,0,0,13,15,10,15,5,0,0,3,15,2,0,11,8,0,0,4,12,0,0,8,8,0,0,5,8,0,0,9,8,0,0,4,11,0,1,12,7,0,0,2,14,5,10,12,0,0,0,0,6,13,10,0,0,0,0\n")
	openers := []func(string, Options) (Source, error){OpenCriteo, OpenAvazu, OpenLibsvm, OpenDigits}
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(t.TempDir(), "in")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, open := range openers {
			for _, skip := range []bool{false, true} {
				src, err := open(path, Options{SkipBadLines: skip, Vocab: 1000, DenseDims: 2})
				if err != nil {
					continue // a broken gzip header: refused at open
				}
				drain(t, src)
				src.Close()
			}
		}
	})
}

func drain(t *testing.T, src Source) {
	for {
		b, err := src.Next(context.Background(), 3)
		var le *LineError
		if errors.Is(err, io.EOF) || errors.As(err, &le) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Validate(src.Schema()); err != nil {
			t.Fatal(err)
		}
	}
}
