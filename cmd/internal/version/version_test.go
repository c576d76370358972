package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/udpgate/udpgate", Version: "v0.0.0-20261122101010-0b7276d12345+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0b7276d1234567890abcdef0123456789abcdef0"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, c := range []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		want     Info
		str      string
	}{
		{
			name: "git checkout",
			bi:   stamped,
			want: Info{Version: "v0.0.0-20261122101010-0b7276d12345+dirty", Revision: "0b7276d1234567890abcdef0123456789abcdef0", Modified: true, GoVersion: "go1.26.8"},
			str:  "v0.0.0-20261122101010-0b7276d12345+dirty (0b7276d12345, modified) go1.26.8",
		},
		{
			name: "release by the linker", bi: stamped, override: "v0.1.0",
			want: Info{Version: "v0.1.0", Revision: "0b7276d1234567890abcdef0123456789abcdef0", Modified: true, GoVersion: "go1.26.8"},
			str:  "v0.1.0 (0b7276d12345, modified) go1.26.8",
		},
		{
			name: "no VCS", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: Info{Version: "(devel)", GoVersion: "go1.26.8"},
			str:  "(devel) go1.26.8",
		},
		{
			name: "module download", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			want: Info{Version: "v1.2.3", GoVersion: "go1.26.8"},
			str:  "v1.2.3 go1.26.8",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := fromBuildInfo(c.bi, c.override)
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			if s := got.String(); s != c.str {
				t.Errorf("String() = %q, want %q", s, c.str)
			}
		})
	}
	if got := fromBuildInfo(nil, ""); got.Version != "(devel)" || got.GoVersion == "" {
		t.Errorf("no build info: %+v, want (devel) and the runtime's Go version", got)
	}
}

// TestGet: the test binary has build information of its own.
func TestGet(t *testing.T) {
	i := Get()
	if i.Version == "" || i.GoVersion == "" {
		t.Errorf("Get() = %+v: empty version or Go version", i)
	}
}
