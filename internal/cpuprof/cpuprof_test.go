package cpuprof

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStartWritesAProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := Start(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		t.Error("empty profile")
	}
}

func TestStartWithoutPathDoesNothing(t *testing.T) {
	stop, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

func TestStartReportsAnUnwritablePath(t *testing.T) {
	if _, err := Start(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil {
		t.Error("no error for a path in a missing folder")
	}
}
