// Command oidcop is the OpenID Connect provider of auditlens' sign-in tests:
// zitadel/oidc's example provider (its op package, in-memory storage and
// login page, pinned in go.mod) with users read from a file, one web client
// registered from flags, and a groups claim, which the example storage does
// not assert. The groups claim is in the ID token and in the userinfo
// answer, as Keycloak, Okta and Entra ID put it when configured to.
//
//	oidcop -listen 127.0.0.1:9998 -issuer http://127.0.0.1:9998/ \
//	  -client-id auditlens -client-secret s3cret \
//	  -redirect-uri https://127.0.0.1:8443/auth/oidc/callback -users users.json
//
// users.json maps an ID to a user:
//
//	{"u1": {"username": "alice", "password": "…", "email": "alice@example.com", "groups": ["team-a"]}}
//
// deploy/e2e/build.sh builds it into the user cache; nothing else uses it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

type fileUser struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	Email    string   `json:"email"`
	Name     string   `json:"name"`
	Groups   []string `json:"groups"`
}

// users is the example storage's UserStore over the users file.
type users struct {
	byID   map[string]*storage.User
	groups map[string][]string
}

func (u users) GetUserByID(id string) *storage.User { return u.byID[id] }

func (u users) GetUserByUsername(name string) *storage.User {
	for _, v := range u.byID {
		if v.Username == name {
			return v
		}
	}
	return nil
}

// ExampleClientID names the example's JWT-profile service client, which
// these tests never use.
func (u users) ExampleClientID() string { return "service" }

func readUsers(path string) (users, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return users{}, err
	}
	var in map[string]fileUser
	if err := json.Unmarshal(data, &in); err != nil {
		return users{}, fmt.Errorf("%s: %w", path, err)
	}
	u := users{byID: map[string]*storage.User{}, groups: map[string][]string{}}
	for id, f := range in {
		if f.Username == "" || f.Password == "" {
			return users{}, fmt.Errorf("%s: user %q needs a username and a password", path, id)
		}
		u.byID[id] = &storage.User{
			ID: id, Username: f.Username, Password: f.Password, FirstName: f.Name,
			Email: f.Email, EmailVerified: f.Email != "", PreferredLanguage: language.English,
		}
		u.groups[id] = f.Groups
	}
	return u, nil
}

// withGroups adds the groups claim to what the example storage asserts.
type withGroups struct {
	*storage.Storage
	groups map[string][]string
}

// SetUserinfoFromRequest fills the ID token's claims.
func (s withGroups) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if slices.Contains(scopes, oidc.ScopeOpenID) {
		info.AppendClaims("groups", s.groups[req.GetSubject()])
	}
	return nil
}

// SetUserinfoFromToken fills the userinfo endpoint's answer.
func (s withGroups) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	info.AppendClaims("groups", s.groups[info.Subject])
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9998", "address to serve on")
	issuer := flag.String("issuer", "", "issuer URL (default http://LISTEN/)")
	clientID := flag.String("client-id", "auditlens", "the web client's ID")
	clientSecret := flag.String("client-secret", "", "the web client's secret")
	redirect := flag.String("redirect-uri", "", "the web client's redirect URI")
	usersFile := flag.String("users", "", "users file (JSON; see the package comment)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(log, *listen, *issuer, *clientID, *clientSecret, *redirect, *usersFile); err != nil {
		log.Error("oidcop", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, listen, issuer, clientID, secret, redirect, usersFile string) error {
	if secret == "" || redirect == "" || usersFile == "" {
		return errors.New("-client-secret, -redirect-uri and -users are required")
	}
	u, err := readUsers(usersFile)
	if err != nil {
		return err
	}
	if issuer == "" {
		issuer = "http://" + listen + "/"
	}
	storage.RegisterClients(storage.WebClient(clientID, secret, redirect))
	st := withGroups{Storage: storage.NewStorage(u), groups: u.groups}
	router := exampleop.SetupServer(issuer, st, log, false)
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving", "issuer", issuer, "addr", l.Addr().String())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
