// The words the host shares with its jobs' SDK, defined once in
// CurfewVocabulary, for every client of the host library.
@_exported import CurfewVocabulary
