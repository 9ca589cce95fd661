package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/nn"
)

// metaBatch is the checkpoint metadata key holding the --batch of the run
// that wrote it: resuming replays the data by whole batches, so a resumed
// run must use the same batch size to see the data where it stopped.
const metaBatch = "heterps.train.batch"

// resumeIfPresent loads path into tr when it exists and returns the step it
// resumes from (0 when there is no checkpoint yet). A checkpoint of another
// model, or written with another --batch, is a usage error (exit status 2).
func resumeIfPresent(tr *nn.Trainer, path string, batch int) (int64, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err := checkResumeBatch(path, batch); err != nil {
		return 0, usageError{fmt.Errorf("resume: %w", err)}
	}
	if err := tr.Load(path); err != nil {
		var mismatch *ckpt.ModelMismatchError
		if errors.As(err, &mismatch) {
			return 0, usageError{fmt.Errorf("resume: %w (use another --checkpoint, or the model it was written for)", err)}
		}
		if errors.Is(err, ckpt.ErrNotRegular) {
			return 0, usageError{fmt.Errorf("resume: --checkpoint: %w", err)}
		}
		return 0, fmt.Errorf("resume: %w", err)
	}
	return tr.Opt.Step, nil
}

// checkResumeBatch refuses a checkpoint written with another batch size.
// Checkpoints from before the batch was recorded are accepted.
func checkResumeBatch(path string, batch int) error {
	f, err := ckpt.Open(path)
	if err != nil {
		return nil // Load reports it
	}
	defer f.Close()
	v, ok := f.Meta(metaBatch)
	if !ok {
		return nil
	}
	if was, err := strconv.Atoi(v); err == nil && was != batch {
		return fmt.Errorf("checkpoint %s was trained with --batch %d, not %d: resume with --batch %d (the data is replayed by whole batches)",
			path, was, batch, was)
	}
	return nil
}

func saveCheckpoint(tr *nn.Trainer, path string, batch int) error {
	tr.Meta = map[string]string{metaBatch: strconv.Itoa(batch)}
	if err := tr.Save(path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
