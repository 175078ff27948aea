# syntax=docker/dockerfile:1
#
# auditlens images. Two targets:
#
#   docker build -t auditlens:dev .                                  # default: server stores only
#   docker build --target embedded -t auditlens:dev-embedded .       # + libchdb.so (embedded engine)
#
# The binary is built with CGO_ENABLED=0: chDB is loaded at run time through
# purego, so no C toolchain is needed. purego still makes the executable
# dynamically linked against glibc (ld-linux, libc, libdl, libpthread) to
# dlopen the library, so the runtime base is distroless/base (glibc), not
# distroless/static. Both images run as the distroless nonroot user
# (65532), which the Kubernetes manifests in deploy/kubernetes expect.

ARG GO_VERSION=1.26.8

# --- build: the auditlens binary ---------------------------------------------
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/auditlens ./cmd/auditlens \
 && /out/auditlens version \
 && mkdir -p /out/data

# --- chdb: the pinned libchdb.so, checked by sha256 --------------------------
# scripts/chdb-lib.sh fetches @chdb/lib-linux-x64-gnu with `npm pack` and
# checks the tarball's and the library's sha256 before it lands.
FROM node:22-bookworm-slim AS chdb
COPY scripts/chdb-lib.sh /usr/local/bin/chdb-lib.sh
RUN XDG_CACHE_HOME=/cache bash /usr/local/bin/chdb-lib.sh --verify > /tmp/lib-path \
 && install -D -m 0755 "$(cat /tmp/lib-path)" /out/libchdb.so \
 && rm -rf /cache /root/.npm

# --- embedded: binary + libchdb.so (chdb:// stores, the default) --------------
FROM gcr.io/distroless/base-debian12:nonroot AS embedded
COPY --from=build /out/auditlens /usr/local/bin/auditlens
# /usr/local/lib/libchdb.so is the last place auditlens looks for it.
COPY --from=chdb /out/libchdb.so /usr/local/lib/libchdb.so
# The data directory (spool and chDB data), writable by the nonroot user
# when no volume is mounted there.
COPY --from=build --chown=65532:65532 /out/data /var/lib/auditlens
USER 65532:65532
WORKDIR /var/lib/auditlens
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/auditlens"]
# Beyond loopback serve wants read credentials (docs/access.md): mount a
# token file and add --api-token-file=/etc/auditlens/api/api-tokens.
CMD ["serve", "--listen=:8080", "--data=/var/lib/auditlens"]

# --- server (default): binary only, for clickhouse:// stores -----------------
FROM gcr.io/distroless/base-debian12:nonroot AS server
COPY --from=build /out/auditlens /usr/local/bin/auditlens
# The data directory (spool; chDB data with the embedded target), writable
# by the nonroot user when no volume is mounted there.
COPY --from=build --chown=65532:65532 /out/data /var/lib/auditlens
USER 65532:65532
WORKDIR /var/lib/auditlens
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/auditlens"]
# Give it a server: serve --store clickhouse://user:pass@host:9000/db
# --api-token-file=... (docs/access.md).
CMD ["serve", "--listen=:8080", "--data=/var/lib/auditlens"]
