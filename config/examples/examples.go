// Package examples holds heterps' example files, compiled into the
// binaries so that they work from any directory: resource catalogs
// (catalogs/NAME.toml), the model zoo (models/NAME.toml), jobs
// (jobs/NAME.toml), scheduling problems (problems/NAME.toml) and the devices
// of one machine for op placement (devices/NAME.toml). Package
// config resolves a bare name (no '/', no ".toml") to these files.
package examples

import "embed"

// FS holds catalogs/, devices/, jobs/, models/ and problems/.
//
//go:embed catalogs/*.toml devices/*.toml jobs/*.toml models/*.toml problems/*.toml
var FS embed.FS
