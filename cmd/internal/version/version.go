// Package version says which build of udpgate is running. The Go toolchain
// stamps the module version and, when built from a git checkout, the
// commit into every binary (runtime/debug.ReadBuildInfo); a build without
// the repository (a Docker build that leaves .git out) can set the version
// with the linker:
//
//	go build -ldflags "-X github.com/udpgate/udpgate/cmd/internal/version.override=v0.1.0" ./cmd/server
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// override, set with -ldflags -X, wins over the module version.
var override string

// Info describes a build.
type Info struct {
	// Version is the module version: a release tag (v0.1.0), a
	// pseudo-version of a commit (v0.0.0-20261122...-0b7276d12345, with
	// +dirty when the tree had changes), or "(devel)" when nothing better
	// is known.
	Version string
	// Revision is the VCS commit, "" if the build was not stamped with one.
	Revision string
	// Modified: the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information.
var Get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, override)
})

// fromBuildInfo reads an Info out of a BuildInfo (nil when the binary has
// none, as with some test binaries).
func fromBuildInfo(bi *debug.BuildInfo, override string) Info {
	i := Info{Version: "(devel)", GoVersion: runtime.Version()}
	if bi == nil {
		if override != "" {
			i.Version = override
		}
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if v := bi.Main.Version; v != "" {
		i.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	if override != "" {
		i.Version = override
	}
	return i
}

// String is the one line -version prints:
// "v0.1.0 (0b7276d12345, modified) go1.26.8".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	if i.Revision != "" {
		b.WriteString(" (")
		b.WriteString(i.ShortRevision())
		if i.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	}
	b.WriteString(" ")
	b.WriteString(i.GoVersion)
	return b.String()
}

// ShortRevision is the first 12 characters of the commit, as Go's
// pseudo-versions abbreviate it.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}
