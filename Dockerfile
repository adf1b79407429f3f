# Sluice: one image with every binary (controlplane, dataplane, analytics,
# sluice, and sluice-bench, which `sluice bench` runs); docker-compose.yml
# picks one per service with `command`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/controlplane ./cmd/dataplane ./cmd/analytics ./cmd/sluice ./cmd/sluice-bench

# Small and without a shell: static binaries, CA certificates, a non-root user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080 8081 8082
ENTRYPOINT []
CMD ["sluice", "help"]
