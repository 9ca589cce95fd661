// Package config holds heterps' TOML file schemas as Go types: strict
// decoding (unknown keys are errors), validation into plain runtime values,
// and errors that name the file, the line and column, and the field.
// Golden examples live in config/examples and must always parse.
package config
