// A vector store through client-js: create an index, upsert, query (with a filter), list,
// describe, delete.
import { client, emit, failure, unique } from "./lib.mjs";

const vector = client.getVector("docs");
const indexName = unique("idx").replace(/[^A-Za-z0-9_]/g, "_");
const created = await vector.createIndex({ indexName, dimension: 3, metric: "cosine" });
const upserted = await vector.upsert({
  indexName,
  vectors: [[1, 0, 0], [0, 1, 0], [0.9, 0.1, 0]],
  metadata: [{ topic: "cats", n: 1 }, { topic: "dogs", n: 2 }, { topic: "cats", n: 3 }],
  ids: ["a", "b", "c"],
});
const nearest = await vector.query({ indexName, queryVector: [1, 0, 0], topK: 2 });
const filtered = await vector.query({
  indexName,
  queryVector: [1, 0, 0],
  topK: 5,
  filter: { topic: "cats", n: { $gt: 1 } },
  includeVector: true,
});
const indexes = await vector.getIndexes();
const details = await vector.details(indexName);
const stores = await client.listVectors();
const deleted = await vector.delete(indexName);
emit({
  created,
  upserted,
  nearest: nearest.map((r) => [r.id, Math.round(r.score * 1000) / 1000]),
  filtered: filtered.map((r) => ({ id: r.id, metadata: r.metadata, vector: r.vector })),
  listed: indexes.includes(indexName),
  details,
  stores: stores.vectors.map((v) => v.name),
  deleted,
  afterDelete: await failure(vector.details(indexName)),
  badDimension: await failure(vector.createIndex({ indexName, dimension: 0 })),
});
