# syntax=docker/dockerfile:1
#
# The udpgate server as a container image: a static binary on distroless,
# running as a non-root user, with no shell or package manager inside.
#
#   docker build -t udpgate-server --build-arg VERSION=$(git describe --tags --always --dirty) .
#   docker run --rm -p 7777:7777/udp -p 127.0.0.1:9100:9100 udpgate-server -metrics 0.0.0.0:9100
#
# .git stays out of the build context (.dockerignore), so the version comes
# from VERSION; without it the binary reports "(devel)".

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: the layer is reused while go.mod and go.sum are unchanged.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
# CGO_ENABLED=0: a static binary, so the final image needs no libc.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/udpgate/udpgate/cmd/internal/version.override=${VERSION}" \
      -o /out/udpgate-server ./cmd/server

# distroless/static: CA certificates, tzdata and /etc/passwd, nothing else;
# the nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/udpgate-server /udpgate-server
USER 65532:65532
# 7777/udp: the game port; 9100/tcp: -metrics (/metrics, /healthz, /readyz).
EXPOSE 7777/udp 9100/tcp
ENTRYPOINT ["/udpgate-server"]
CMD ["-listen", "0.0.0.0:7777"]
