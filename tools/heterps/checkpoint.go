package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/heterps/heterps/daemon/nn"
)

// resumeIfPresent loads path into tr when it exists and returns the step it
// resumes from (0 when there is no checkpoint yet).
func resumeIfPresent(tr *nn.Trainer, path string) (int64, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err := tr.Load(path); err != nil {
		return 0, fmt.Errorf("resume: %w", err)
	}
	return tr.Opt.Step, nil
}

func saveCheckpoint(tr *nn.Trainer, path string) error {
	if err := tr.Save(path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
