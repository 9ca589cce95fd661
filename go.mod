module github.com/heterps/heterps

go 1.26.0

require (
	github.com/pelletier/go-toml/v2 v2.4.3 // indirect
	github.com/shirou/gopsutil/v4 v4.26.10 // indirect
	golang.org/x/sys v0.50.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
