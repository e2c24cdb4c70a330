// Placeholder until the ZooKeeper global setup lands (being written now).
export default async function setup(): Promise<() => Promise<void>> {
  return async () => {};
}
