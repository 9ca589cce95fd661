// Package systemd holds heterpsd's systemd units, their GPU drop-in, the
// sysusers.d file and example node files, as `make install` installs them.
// It has no Go code: its tests check the units with systemd-analyze verify
// and the layout `make install-files` produces under DESTDIR.
package systemd
