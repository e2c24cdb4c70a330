# syntax=docker/dockerfile:1
# Shardex node and snapshot-reader image. `docker compose up -d` (see docker-compose.yml) builds it, or:
#   docker build -t shardex:local . && docker run --rm shardex:local node bin/shardex.js --help
#
# Build argument NODE_IMAGE: the base image of every stage (default: the official
# node:20-bookworm-slim). Two final stages, chosen with --target (compose: build.target):
#   runtime (default, the last stage)  npm ci + tsc inside the build; needs the npm registry
#   runtime-prebuilt                   the application prepared on the build host, no registry:
#                                      the tar archive PREBUILT_DIR/app.tar (build argument,
#                                      default .container-build/app, relative to the context)
#                                      holding app/ (package.json, dist/, bin/, proto/ and the
#                                      production node_modules/) and an empty data/;
#                                      test/support/containers.ts prepares one
# BuildKit and buildah (podman build) skip the stages a target does not need.
ARG NODE_IMAGE=node:20-bookworm-slim

# --- compiled: TypeScript compiled in the build, then only the production dependencies kept ------
FROM ${NODE_IMAGE} AS compiled
WORKDIR /build
COPY package.json package-lock.json ./
# Install scripts are skipped: compiling needs only TypeScript, and the dev-only native modules
# (better-sqlite3 for benchmarks, esbuild for tests) would want a compiler the slim image lacks.
# classic-level (LevelDB) loads its prebuilt binary at run time: it needs no install script.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev --ignore-scripts && npm cache clean --force
COPY bin ./bin
# proto/ is read at run time by the gRPC service (dist/transport loads ../../proto/shardex.proto).
COPY proto ./proto
RUN mkdir -p /out/app /out/data && cp -R package.json dist bin proto node_modules /out/app/

# --- prebuilt: the same tree, prepared on the build host ---------------------------------------
FROM scratch AS prebuilt
ARG PREBUILT_DIR=.container-build/app
# ADD unpacks a local tar archive: one file in the build context instead of thousands.
ADD ${PREBUILT_DIR}/app.tar /out/

# --- what both final stages share. No RUN: it works on a base image without a shell -------------
FROM ${NODE_IMAGE} AS runtime-base
ENV NODE_ENV=production
WORKDIR /app
USER node
# HTTP (clients, operators) and gRPC (node to node) with the default ports of a data node;
# docker-compose.yml runs readers on 8990/9990.
EXPOSE 8983 9983
# A node needs a ZooKeeper and an address its peers can reach: docker-compose.yml gives both.
CMD ["node", "bin/shardex.js", "--help"]

FROM runtime-base AS runtime-prebuilt
COPY --from=prebuilt /out/app/ ./
# Named volumes mounted on /data start out owned by the node user (uid 1000 in the official image).
COPY --from=prebuilt --chown=node:node /out/data/ /data/
VOLUME ["/data"]

FROM runtime-base AS runtime
COPY --from=compiled /out/app/ ./
COPY --from=compiled --chown=node:node /out/data/ /data/
VOLUME ["/data"]
