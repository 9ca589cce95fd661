package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
)

// Record marks of a job's data file (data.SaveMarks) outlive the process
// that noted them in the job's checkpoint directory: stage 0's first
// replica saves them there as it trains, and a replica that starts far
// into the data — restored from a checkpoint, or joining a running stage —
// loads them first, so that it moves to where its stage had got to instead
// of reading the file up to there, even on a node that never read the file.
// A node that cannot reach the directory trains as it would without them.

// marksSaveEvery is how often stage 0's first replica saves its data
// file's marks; a variable so that tests can shorten it.
var marksSaveEvery = time.Minute

// savesDataMarks reports whether the task saves its data file's marks.
func savesDataMarks(s api.Task) bool {
	return s.Stage == 0 && s.Replica == 0 && s.CheckpointDir != "" && !generated(s.Data)
}

// saveDataMarks saves the task's data file's marks into its checkpoint
// directory every marksSaveEvery, and once more when the returned stop is
// called (which waits for it), if the task is stage 0's first replica
// (savesDataMarks); it does nothing otherwise.
func saveDataMarks(ctx context.Context, s api.Task, log *slog.Logger) (stop func()) {
	if !savesDataMarks(s) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	warned, saved := false, 0
	save := func() {
		if data.NotedMarks(s.Data) == saved {
			return // the marks grow during the first pass only
		}
		n, err := data.SaveMarks(s.Data, s.CheckpointDir)
		if err != nil && !warned {
			warned = true // a directory this node cannot reach stays so
			log.Warn("saving the data file's record marks (restores on other nodes read the file instead)", "dir", s.CheckpointDir, "err", err)
		}
		if err == nil {
			saved = n
		}
	}
	wg.Go(func() {
		tick := time.NewTicker(marksSaveEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				save()
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		save()
	}
}

// loadDataMarks gives this process the marks saved of the task's data
// file in its checkpoint directory, or in that of the checkpoint it
// restores, when it starts far into the data.
func loadDataMarks(s api.Task, log *slog.Logger) {
	if s.Stage != 0 || generated(s.Data) || (s.FirstStep == 0 && len(s.Members) == 0) {
		return
	}
	dirs := []string{s.CheckpointDir}
	if s.RestoreDir != "" {
		dirs = append(dirs, filepath.Dir(s.RestoreDir))
	}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		n, err := data.LoadMarks(s.Data, dir)
		if err != nil {
			log.Warn("loading the data file's record marks (the file is read up to where the stage got to instead)", "dir", dir, "err", err)
			continue
		}
		if n > 0 {
			log.Info("data file's record marks loaded", "dir", dir, "marks", n)
			return
		}
	}
}
