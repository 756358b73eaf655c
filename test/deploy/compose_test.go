package deploy

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestComposeFilesAreValidProjects loads both compose files with the
// Compose Specification's own loader (compose-go, the library `docker
// compose` is built on: schema, anchors and merges, depends_on), every
// profile on, and checks what no Docker engine is needed for (none runs
// here; docs/deploy.md and docs/cluster.md say what was run): each bind
// mount's source and each build's context and Dockerfile exist; a
// gateway's --config is a file mounted into it, which `gateway config
// check` accepts with the service's environment; and every host its
// configuration names (Redis, NATS) is a service of the project.
func TestComposeFilesAreValidProjects(t *testing.T) {
	for _, file := range []string{"deploy/compose.yaml", "deploy/cluster/compose.yaml"} {
		t.Run(strings.ReplaceAll(file, "/", "_"), func(t *testing.T) {
			p := loadCompose(t, filepath.Join(root, file))
			gateways := 0
			for name, s := range p.Services {
				for _, v := range s.Volumes {
					if v.Type == types.VolumeTypeBind {
						if _, err := os.Stat(v.Source); err != nil {
							t.Errorf("%s: service %s mounts %s: %v", file, name, v.Source, err)
						}
					}
				}
				if s.Build == nil {
					continue
				}
				df := s.Build.Dockerfile
				if !filepath.IsAbs(df) {
					df = filepath.Join(s.Build.Context, df)
				}
				if _, err := os.Stat(df); err != nil {
					t.Errorf("%s: service %s builds with %s: %v", file, name, df, err)
				}
				gateways++
				checkComposeGateway(t, file, p, name, s)
			}
			if gateways == 0 {
				t.Errorf("%s: no service builds the gateway", file)
			}
		})
	}
}

// loadCompose loads a compose file as `docker compose --profile '*'
// config` would, from an empty environment.
func loadCompose(t *testing.T, file string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithProfiles([]string{"*"}),
		cli.WithEnv([]string{}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%s does not load as a compose project: %v", file, err)
	}
	return p
}

// checkComposeGateway checks the gateway service s of p: its --config is
// mounted and accepted, and the hosts it names are services of p.
func checkComposeGateway(t *testing.T, file string, p *types.Project, name string, s types.ServiceConfig) {
	t.Helper()
	cmd := []string(s.Command)
	var inside string
	for i := 0; i+1 < len(cmd); i++ {
		if cmd[i] == "--config" {
			inside = cmd[i+1]
		}
	}
	if inside == "" {
		t.Errorf("%s: service %s runs the gateway without --config: %v", file, name, cmd)
		return
	}
	var host string
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == inside {
			host = v.Source
		}
	}
	if host == "" {
		t.Errorf("%s: service %s reads %s, which no bind mount provides", file, name, inside)
		return
	}
	var env []string
	for k, v := range s.Environment {
		if v != nil {
			env = append(env, k+"="+*v)
		}
	}
	check(t, host, env)
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range env {
		b = append(append(b, '\n'), e...)
	}
	for _, u := range urlRef.FindAllString(string(b), -1) {
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() == "" {
			continue
		}
		if _, ok := p.Services[pu.Hostname()]; !ok {
			t.Errorf("%s: service %s's configuration names %s, not a service of the project", file, name, u)
		}
	}
}

// urlRef finds the Redis and NATS URLs in a configuration.
var urlRef = regexp.MustCompile(`\b(?:redis|rediss|nats|tls)://[^\s,"'\]]+`)
