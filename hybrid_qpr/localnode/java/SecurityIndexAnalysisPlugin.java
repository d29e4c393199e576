package org.hybridqpr.securityanalysis;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.LowerCaseFilter;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.Tokenizer;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/**
 * The analysis components that the security index's "email" analyzer names (tokenizer
 * uax_url_email; filters pattern_capture, lowercase, unique). Elasticsearch has them in its
 * analysis-common module, which the Maven Central integ-test zip lacks and Central does not
 * publish; without them the security index cannot be created, so neither API keys nor native
 * users can exist. Each one wraps the Lucene class of the same name (lucene-analysis-common and
 * lucene-core, both in the server's lib/); "unique" drops a term already seen in the stream.
 * Built by hybrid-qpr for its secured local test node only (hybrid_qpr.localnode.security).
 * Only the factory interfaces are used, so the same source compiles against 8.19 and 9.5.
 */
public class SecurityIndexAnalysisPlugin extends Plugin implements AnalysisPlugin {

    private static TokenFilterFactory filter(String name, java.util.function.UnaryOperator<TokenStream> wrap) {
        return new TokenFilterFactory() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public TokenStream create(TokenStream in) {
                return wrap.apply(in);
            }
        };
    }

    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        AnalysisProvider<TokenFilterFactory> patternCapture = (indexSettings, env, name, settings) -> {
            List<String> regexes = settings.getAsList("patterns");
            Pattern[] patterns = regexes.stream().map(Pattern::compile).toArray(Pattern[]::new);
            boolean preserveOriginal = settings.getAsBoolean("preserve_original", true);
            return filter(name, in -> new PatternCaptureGroupTokenFilter(in, preserveOriginal, patterns));
        };
        return Map.of(
            "pattern_capture", AnalysisPlugin.requiresAnalysisSettings(patternCapture),
            "lowercase", (indexSettings, env, name, settings) -> filter(name, LowerCaseFilter::new),
            "unique", (indexSettings, env, name, settings) -> filter(name, Unique::new));
    }

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        return Map.of("uax_url_email", (indexSettings, env, name, settings) -> new TokenizerFactory() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public Tokenizer create() {
                return new UAX29URLEmailTokenizer();
            }
        });
    }

    /** Passes each distinct term once, at its first position. */
    static final class Unique extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);
        private final CharArraySet seen = new CharArraySet(8, false);

        Unique(TokenStream in) {
            super(in);
        }

        @Override
        public boolean incrementToken() throws IOException {
            while (input.incrementToken()) {
                char[] chars = new char[term.length()];
                System.arraycopy(term.buffer(), 0, chars, 0, term.length());
                if (seen.add(chars)) {
                    return true;
                }
            }
            return false;
        }

        @Override
        public void reset() throws IOException {
            super.reset();
            seen.clear();
        }
    }
}
