package main

import (
	"fmt"
	"io"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/errlines"
)

// checkConfig validates a node file or a coordinator's catalog, telling
// which it took the file for, and returns the exit status: exitOK when
// valid, exitUsage with the error (file:line: field: what) when not. A
// node file's secret_file is read too, since a secret that is missing or
// readable by others stops the daemon as surely as a bad field.
func checkConfig(path string, stdout, stderr io.Writer) int {
	kind, err := detectConfig(path)
	if err == nil {
		switch kind {
		case "node":
			err = checkNodeFile(path, stdout)
		case "catalog":
			err = checkCatalogFile(path, stdout)
		}
	}
	if err != nil {
		if kind != "" {
			fmt.Fprintf(stderr, "heterpsd: %s: read as a %s file\n", path, kind)
		}
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	return exitOK
}

// detectConfig says whether path is a node file (type is a string) or a
// catalog ([[type]] tables), from the shape of its keys.
func detectConfig(path string) (string, error) {
	var top map[string]any
	if _, err := config.DecodeFile(path, &top); err != nil {
		return "", err
	}
	_, hasCoordinator := top["coordinator"]
	switch top["type"].(type) {
	case []any, []map[string]any:
		return "catalog", nil
	case string:
		return "node", nil
	case nil:
		if hasCoordinator {
			return "node", nil
		}
	}
	return "", fmt.Errorf("%s: neither a node file (name, coordinator, listen, type = \"...\") nor a coordinator's catalog ([[type]] tables)", path)
}

func checkNodeFile(path string, stdout io.Writer) error {
	n, err := config.LoadNode(path)
	if err != nil {
		return err
	}
	if n.SecretFile != "" {
		if _, err := wire.LoadSecret(n.SecretFile); err != nil {
			src, _ := config.ReadFile(path)
			return config.NewLocator(path, src).Errorf("secret_file", "%v", err)
		}
	}
	if cpus := n.CPUList(); cpus != nil {
		if err := cpuset.Check(cpus); err != nil {
			src, _ := config.ReadFile(path)
			return config.NewLocator(path, src).Errorf("cpus", "%v", err)
		}
	}
	fmt.Fprintf(stdout, "%s: node file, valid: node %s offers %d unit(s) of %s to %s\n", path, n.Name, n.Units, n.Type, n.Coordinator)
	return nil
}

func checkCatalogFile(path string, stdout io.Writer) error {
	c, err := config.LoadCatalog(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: coordinator catalog, valid: %d type(s), %d node(s)\n", path, len(c.Types), len(c.Nodes))
	return nil
}
