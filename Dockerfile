# syntax=docker/dockerfile:1
# Shardex node image: `docker compose up -d --build` (see docker-compose.yml) or
#   docker build -t shardex . && docker run --rm shardex node bin/shardex.js --help

# --- build: compile TypeScript ------------------------------------------------------------------
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# Install scripts are skipped: compiling needs only TypeScript, and the dev-only native modules
# (better-sqlite3 for benchmarks, esbuild for tests) would want a compiler node:20-slim lacks.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# --- runtime: production dependencies and the compiled code ---------------------------------------
FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
# classic-level (LevelDB) ships prebuilt binaries for linux x64 and arm64 (glibc): no compiler needed.
RUN npm ci --omit=dev && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY bin ./bin
# proto/ is read at run time by the gRPC service (dist/node/grpc.js loads ../../proto/shardex.proto).
COPY proto ./proto
# Named volumes mounted on /data start out owned by the node user.
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
# HTTP (clients, operators) and gRPC (node to node) with the default ports.
EXPOSE 8983 9983
# A node needs a ZooKeeper and an address its peers can reach: docker-compose.yml gives both.
CMD ["node", "bin/shardex.js", "--help"]
