// Apache Lucene as the search benchmark's baseline (issue 15): the same documents and queries
// as Shardex, indexed and searched in one JVM, timed the way bench/search.mjs times the
// in-process engines (warm-up rounds untimed, then rounds of the mix one query after another,
// the page's documents looked up as a fetch). Compiled and run by bench/lucene.mjs.
//
// The fetch is like for like with the in-process ShardIndex it is compared with: that engine
// looks the page's documents up in a map in memory, so this one reads the hits' ids from doc
// values and looks their source up in a map too. (Loading Lucene's stored `_source` would
// decompress a stored-fields block per hit: measured here, a rare term's page took 1.9 ms with
// it and 0.2 ms without. A cost of the store, not of search, which the ShardIndex figures do not
// pay either.) The source is still
// stored in the index, so the indexing rate and the index files include it.
//
// Input (written by bench/lucene.mjs; tab-separated, no escaping needed for the corpus):
//   docs file:    id \t title \t body \t category \t price \t source-json
//   queries file: kind \t words (space-separated) \t category or '' \t '1' to sort by price desc
// Output: progress lines on stderr. On stdout, once the index is built and both modes are warmed
// up, one JSON line of its figures; then, for each line `MODE ROUNDS` read from stdin (MODE
// `exact` or `default`), one JSON line of that many timed rounds of the mix (ms by query), so
// that the caller can alternate blocks of Lucene's rounds with its own engine's. EOF ends it.
//
// Analysis: StandardAnalyzer without stop words (Shardex's analyzer, for this corpus of
// lower-case ASCII words). Scoring: BM25 (k1 1.2, b 0.75), a word in either text field summed
// over the fields, as Shardex's default fields are. Two ways of collecting: counting every hit
// (what Shardex does: `total` exact), and Lucene's default (exact up to 1,000 hits, then a lower
// bound, which lets block-max WAND skip).
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Locale;

import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.DoubleDocValuesField;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.SortedDocValuesField;
import org.apache.lucene.document.StoredField;
import org.apache.lucene.document.StringField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.MultiDocValues;
import org.apache.lucene.index.SortedDocValues;
import org.apache.lucene.index.Term;
import org.apache.lucene.index.TieredMergePolicy;
import org.apache.lucene.search.BooleanClause.Occur;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.PhraseQuery;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.Sort;
import org.apache.lucene.search.SortField;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.TopFieldCollector;
import org.apache.lucene.search.TopScoreDocCollector;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.BytesRef;

public final class LuceneBench {
  private static final String[] TEXT_FIELDS = {"title", "body"};
  private static final Sort BY_PRICE_DESC = new Sort(new SortField("price", SortField.Type.DOUBLE, true), new SortField("id", SortField.Type.STRING));
  /** IndexSearcher.search(query, n)'s default: hits are counted exactly up to this many. */
  private static final int DEFAULT_TOTAL_HITS_THRESHOLD = 1000;

  private record Spec(String kind, String[] words, String category, boolean sortPrice) {}

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: LuceneBench DOCS_FILE QUERIES_FILE INDEX_DIR WARMUP LIMIT, then MODE ROUNDS lines on stdin");
      System.exit(2);
    }
    Path docsFile = Paths.get(args[0]);
    Path queriesFile = Paths.get(args[1]);
    Path indexDir = Paths.get(args[2]);
    int warmup = Integer.parseInt(args[3]);
    int limit = Integer.parseInt(args[4]);

    long heapAtStart = usedHeap();
    List<Spec> mix = readQueries(queriesFile);

    // ---- indexing: every document, then a commit (fsync), as a durable single copy ----
    int count = 0;
    long t0 = System.nanoTime();
    try (FSDirectory dir = FSDirectory.open(indexDir)) {
      IndexWriterConfig cfg = new IndexWriterConfig(analyzer());
      cfg.setOpenMode(IndexWriterConfig.OpenMode.CREATE);
      cfg.setRAMBufferSizeMB(256);
      // Separate files (no compound .cfs), so that the stored fields' share can be measured.
      cfg.setUseCompoundFile(false);
      TieredMergePolicy merges = new TieredMergePolicy();
      merges.setNoCFSRatio(0.0);
      cfg.setMergePolicy(merges);
      try (IndexWriter w = new IndexWriter(dir, cfg); BufferedReader in = Files.newBufferedReader(docsFile, StandardCharsets.UTF_8)) {
        long last = System.nanoTime();
        for (String line; (line = in.readLine()) != null; ) {
          String[] f = line.split("\t", 6);
          Document d = new Document();
          d.add(new StringField("id", f[0], Field.Store.YES));
          d.add(new SortedDocValuesField("id", new BytesRef(f[0])));
          d.add(new TextField("title", f[1], Field.Store.NO));
          d.add(new TextField("body", f[2], Field.Store.NO));
          d.add(new StringField("category", f[3], Field.Store.NO));
          d.add(new DoubleDocValuesField("price", Double.parseDouble(f[4])));
          // The document's own JSON, as Elasticsearch keeps `_source`: what a fetch returns.
          d.add(new StoredField("_source", f[5]));
          w.addDocument(d);
          count++;
          if (System.nanoTime() - last > 5_000_000_000L) {
            last = System.nanoTime();
            System.err.printf(Locale.ROOT, "  Lucene: %,d docs indexed%n", count);
          }
        }
        w.commit();
      }
    }
    double indexSeconds = (System.nanoTime() - t0) / 1e9;
    long[] bytes = indexBytes(indexDir);

    try (FSDirectory dir = FSDirectory.open(indexDir); DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher searcher = new IndexSearcher(reader);
      List<Query> queries = new ArrayList<>();
      for (Spec s : mix) queries.add(query(s));
      long[] totals = new long[queries.size()];
      for (int i = 0; i < queries.size(); i++) totals[i] = searcher.count(queries.get(i));
      // The searcher's heap: what the open index costs the JVM (the documents were never held).
      long heapBytes = usedHeap() - heapAtStart;
      // The documents by id, for the fetch (measured after the heap figure, as the JS side's map).
      Map<String, String> sources = new HashMap<>();
      try (BufferedReader in = Files.newBufferedReader(docsFile, StandardCharsets.UTF_8)) {
        for (String line; (line = in.readLine()) != null; ) {
          String[] f = line.split("\t", 6);
          sources.put(f[0], f[5]);
        }
      }
      Fetcher fetch = new Fetcher(reader, sources);

      StringBuilder out = new StringBuilder();
      out.append("{\"docs\":").append(count);
      out.append(",\"indexSeconds\":").append(indexSeconds);
      out.append(",\"indexBytes\":").append(bytes[0]);
      out.append(",\"storedBytes\":").append(bytes[1]);
      out.append(",\"heapBytes\":").append(heapBytes);
      out.append(",\"segments\":").append(reader.leaves().size());
      out.append(",\"totals\":").append(json(totals));
      out.append('}');
      for (String mode : new String[] {"exact", "default"}) {
        System.err.printf(Locale.ROOT, "Lucene (%s totals): %d warm-up rounds of %d queries ...%n", mode, warmup, queries.size());
        for (int r = 0; r < warmup; r++) for (int i = 0; i < queries.size(); i++) runOne(searcher, fetch, queries.get(i), mix.get(i), limit, threshold(mode));
      }
      System.out.println(out);
      System.out.flush();
      BufferedReader commands = new BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String line; (line = commands.readLine()) != null; ) {
        String[] c = line.trim().split(" ");
        if (c.length != 2 || !(c[0].equals("exact") || c[0].equals("default"))) throw new IllegalArgumentException("expected `exact|default ROUNDS`, got: " + line);
        int rounds = Integer.parseInt(c[1]);
        int threshold = threshold(c[0]);
        double[][] ms = new double[queries.size()][rounds];
        for (int r = 0; r < rounds; r++) {
          for (int i = 0; i < queries.size(); i++) {
            long s = System.nanoTime();
            runOne(searcher, fetch, queries.get(i), mix.get(i), limit, threshold);
            ms[i][r] = (System.nanoTime() - s) / 1e6;
          }
        }
        System.out.println("{\"mode\":\"" + c[0] + "\",\"ms\":" + json(ms) + "}");
        System.out.flush();
      }
    }
  }

  /** Hits counted exactly: every one (`exact`, what Shardex does by default), or Lucene's default (exact up to 1,000). */
  private static int threshold(String mode) {
    return mode.equals("exact") ? Integer.MAX_VALUE : DEFAULT_TOTAL_HITS_THRESHOLD;
  }

  private static StandardAnalyzer analyzer() {
    return new StandardAnalyzer(CharArraySet.EMPTY_SET);
  }

  /** The page's documents: ids from doc values, sources from the map. */
  private static final class Fetcher {
    private final DirectoryReader reader;
    private final Map<String, String> sources;

    Fetcher(DirectoryReader reader, Map<String, String> sources) {
      this.reader = reader;
      this.sources = sources;
    }

    int fetch(ScoreDoc[] hits) throws IOException {
      // Doc values iterate forward only: a fresh iterator per hit, as a top-k page needs few.
      int n = 0;
      for (ScoreDoc sd : hits) {
        SortedDocValues ids = MultiDocValues.getSortedValues(reader, "id");
        if (!ids.advanceExact(sd.doc)) continue;
        String source = sources.get(ids.binaryValue().utf8ToString());
        if (source != null) n += source.length();
      }
      return n;
    }
  }

  /** One query and its page: the top `limit` hits and their documents. */
  private static int runOne(IndexSearcher searcher, Fetcher fetch, Query q, Spec s, int limit, int threshold) throws IOException {
    TopDocs top;
    if (s.sortPrice()) {
      TopFieldCollector c = TopFieldCollector.create(BY_PRICE_DESC, limit, threshold);
      searcher.search(q, c);
      top = c.topDocs();
    } else {
      TopScoreDocCollector c = TopScoreDocCollector.create(limit, threshold);
      searcher.search(q, c);
      top = c.topDocs();
    }
    return fetch.fetch(top.scoreDocs);
  }

  /** A word in the default fields: either text field, scores summed (Shardex's `field: null`). */
  private static Query word(String w) {
    BooleanQuery.Builder b = new BooleanQuery.Builder();
    for (String f : TEXT_FIELDS) b.add(new TermQuery(new Term(f, w)), Occur.SHOULD);
    return b.build();
  }

  private static Query query(Spec s) {
    Query text;
    switch (s.kind()) {
      case "term" -> text = word(s.words()[0]);
      case "or", "and" -> {
        BooleanQuery.Builder b = new BooleanQuery.Builder();
        for (String w : s.words()) b.add(word(w), s.kind().equals("and") ? Occur.MUST : Occur.SHOULD);
        text = b.build();
      }
      case "phrase" -> {
        BooleanQuery.Builder b = new BooleanQuery.Builder();
        for (String f : TEXT_FIELDS) b.add(new PhraseQuery(f, s.words()), Occur.SHOULD);
        text = b.build();
      }
      default -> throw new IllegalArgumentException("unknown query kind " + s.kind());
    }
    if (s.category().isEmpty()) return text;
    return new BooleanQuery.Builder().add(text, Occur.MUST).add(new TermQuery(new Term("category", s.category())), Occur.FILTER).build();
  }

  private static List<Spec> readQueries(Path file) throws IOException {
    List<Spec> out = new ArrayList<>();
    for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
      if (line.isEmpty()) continue;
      String[] f = line.split("\t", -1);
      out.add(new Spec(f[0], f[1].split(" "), f[2], f[3].equals("1")));
    }
    return out;
  }

  /** The index's files, and the stored-fields part of them (.fdt, .fdx, .fdm). */
  private static long[] indexBytes(Path dir) throws IOException {
    long all = 0;
    long stored = 0;
    try (DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
      for (Path p : files) {
        long n = Files.size(p);
        all += n;
        String name = p.getFileName().toString();
        if (name.endsWith(".fdt") || name.endsWith(".fdx") || name.endsWith(".fdm")) stored += n;
      }
    }
    return new long[] {all, stored};
  }

  private static long usedHeap() {
    Runtime rt = Runtime.getRuntime();
    for (int i = 0; i < 3; i++) System.gc();
    return rt.totalMemory() - rt.freeMemory();
  }

  private static String json(long[] a) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < a.length; i++) b.append(i == 0 ? "" : ",").append(a[i]);
    return b.append(']').toString();
  }

  private static String json(double[][] a) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < a.length; i++) {
      b.append(i == 0 ? "[" : ",[");
      for (int j = 0; j < a[i].length; j++) b.append(j == 0 ? "" : ",").append(String.format(Locale.ROOT, "%.4f", a[i][j]));
      b.append(']');
    }
    return b.append(']').toString();
  }
}
