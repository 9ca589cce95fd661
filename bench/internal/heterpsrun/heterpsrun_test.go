package heterpsrun

import (
	"testing"

	"github.com/heterps/heterps/config"
)

func TestJobFileParsesAsTheJobAsked(t *testing.T) {
	for _, sync := range []string{"", config.DenseSyncAllreduce, config.DenseSyncPS} {
		job := Job{Model: "ctrdnn", Data: "synthetic:1", Steps: 320, Batch: 512}
		jf, err := config.ParseJob("bench.toml", jobFile(job, 60430.5, sync))
		if err != nil {
			t.Fatalf("dense_sync %q: %v", sync, err)
		}
		if jf.Model != job.Model || jf.Data != job.Data || jf.Steps != int64(job.Steps) || jf.Batch != job.Batch || jf.ThroughputLimit != 60430.5 {
			t.Errorf("dense_sync %q: parsed %+v", sync, jf)
		}
		if sync != "" && jf.DenseSync != sync {
			t.Errorf("dense_sync %q: parsed %q", sync, jf.DenseSync)
		}
	}
}

func TestJobFileRunsInTheModeAsked(t *testing.T) {
	for mode, want := range map[string]string{"": "bsp", "bsp": "bsp", "asp": "asp"} {
		jf, err := config.ParseJob("bench.toml", jobFile(Job{Model: "ctrdnn", Data: "synthetic:1", Steps: 10, Batch: 64, Mode: mode}, 1000, ""))
		if err != nil || jf.Mode != want {
			t.Errorf("mode %q: parsed %+v, %v; want mode %s", mode, jf, err, want)
		}
	}
}
