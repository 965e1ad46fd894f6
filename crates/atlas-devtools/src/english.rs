//! English-like conversation turns for the vector-accuracy benchmark: sentences from a small
//! grammar over a few hundred common words (people, places, activities, objects, times,
//! feelings), two or three clauses a turn, so that a sentence model sees real English and the
//! vectors spread as real memories' do. Deterministic for a seed.

use crate::rng::Xorshift;

const NAMES: &[&str] = &[
    "Ann", "Bo", "Caroline", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam", "Maya", "Noor",
    "Oscar", "Priya", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Victor", "Wen", "Yusuf", "Zoe",
];
const PLACES: &[&str] = &[
    "the beach",
    "Lisbon",
    "the office",
    "my grandmother's house",
    "the park",
    "a small cafe",
    "the mountains",
    "the library",
    "Berlin",
    "the lake",
    "the hospital",
    "school",
    "the gym",
    "a concert hall",
    "the market",
    "Tokyo",
    "the airport",
    "a bookshop",
    "the garden",
    "the museum",
    "a farm",
    "the stadium",
    "Nairobi",
    "the river",
    "a night class",
];
const ACTIVITIES: &[&str] = &[
    "went hiking",
    "started painting",
    "learned to bake bread",
    "ran a half marathon",
    "adopted a puppy",
    "joined a choir",
    "moved house",
    "changed jobs",
    "planted tomatoes",
    "fixed the old bike",
    "wrote a short story",
    "took a pottery class",
    "visited my parents",
    "tried rock climbing",
    "cooked for twenty people",
    "read three novels",
    "volunteered at a shelter",
    "played chess all night",
    "learned some Spanish",
    "built a bookshelf",
    "went camping",
    "got a promotion",
    "watched the meteor shower",
    "started a podcast",
    "taught my nephew to swim",
];
const OBJECTS: &[&str] = &[
    "a red umbrella",
    "my grandfather's watch",
    "a vintage camera",
    "the blue notebook",
    "a guitar",
    "an old map",
    "a pair of running shoes",
    "the new laptop",
    "a wooden chess set",
    "a sourdough starter",
    "a telescope",
    "a yoga mat",
    "a box of letters",
    "a ceramic bowl",
    "the family recipe book",
];
const TIMES: &[&str] = &[
    "last weekend",
    "yesterday",
    "two years ago",
    "in May",
    "this morning",
    "after work",
    "during the holidays",
    "last summer",
    "on my birthday",
    "every Sunday",
    "a few weeks ago",
    "when I was a kid",
    "in the spring",
    "on Friday night",
    "since January",
];
const FEELINGS: &[&str] = &[
    "it made me really happy",
    "I was exhausted afterwards",
    "honestly it was a bit scary",
    "I felt proud of myself",
    "it was more fun than I expected",
    "I keep thinking about it",
    "it helped me relax",
    "I was nervous at first",
    "it reminded me of home",
    "I would do it again",
    "it was harder than it looked",
    "my friends loved it",
];
const QUESTIONS: &[&str] = &[
    "have you ever tried that?",
    "what do you think about it?",
    "do you want to come next time?",
    "how was your week?",
    "did you finish the project?",
    "are you still learning the piano?",
];

/// A generator of turns.
pub struct EnglishTurns {
    rng: Xorshift,
}

impl EnglishTurns {
    pub fn new(seed: u64) -> Self {
        EnglishTurns { rng: Xorshift::new(seed) }
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.rng.next_u64() % words.len() as u64) as usize]
    }

    fn clause(&mut self) -> String {
        match self.rng.next_u64() % 6 {
            0 => format!("I {} at {} {}", self.pick(ACTIVITIES), self.pick(PLACES), self.pick(TIMES)),
            1 => format!("{} {} {}", self.pick(NAMES), self.pick(ACTIVITIES), self.pick(TIMES)),
            2 => format!("{} gave me {} {}", self.pick(NAMES), self.pick(OBJECTS), self.pick(TIMES)),
            3 => {
                format!("we met {} at {} and talked about {}", self.pick(NAMES), self.pick(PLACES), self.pick(OBJECTS))
            }
            4 => self.pick(FEELINGS).to_owned(),
            _ => format!("I found {} at {}", self.pick(OBJECTS), self.pick(PLACES)),
        }
    }

    /// One turn: two or three clauses, sometimes a question.
    pub fn turn(&mut self) -> String {
        let clauses = 2 + (self.rng.next_u64() % 2) as usize;
        let mut text: Vec<String> = (0..clauses).map(|_| self.clause()).collect();
        if self.rng.next_u64().is_multiple_of(4) {
            text.push(self.pick(QUESTIONS).to_owned());
        }
        let mut turn = text.join(", ");
        if let Some(first) = turn.get(..1) {
            turn = first.to_uppercase() + &turn[1..];
        }
        turn
    }
}
