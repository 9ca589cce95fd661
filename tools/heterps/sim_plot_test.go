package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimPlotDrawsAPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.png")
	var out, errOut bytes.Buffer
	if code := runSim([]string{"--jobs", "8", "--cores", "16", "--policy", "all", "--plot", path}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() < 100 {
		t.Fatalf("%s: %v, bounds %v", path, err, img.Bounds())
	}
}

func TestSimSweepSaysWhereTheGainVanishes(t *testing.T) {
	var out, errOut bytes.Buffer
	// At the contended size quality beats fair (TestSimQualityBeatsFair...);
	// with 10,000 cores every job gets all the units it can use under
	// either policy, so the gain is gone.
	args := append(append([]string{}, contended...), "--sweep-cores", "10000,32")
	if code := runSim(args, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	s := out.String()
	at32, at10k := strings.Index(s, "   32  "), strings.Index(s, "10000  ")
	if !strings.Contains(s, "below 1% from 10000 cores on") || at32 < 0 || at32 > at10k {
		t.Errorf("want rows by size and the gain gone from 10000 cores on:\n%s", s)
	}
	for _, bad := range []string{"0", "8,x", "20000"} {
		if code := runSim([]string{"--sweep-cores", bad}, &out, &errOut); code != exitUsage {
			t.Errorf("--sweep-cores %s: exit %d, want usage", bad, code)
		}
	}
}
